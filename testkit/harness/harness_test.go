package harness

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/signature"
	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestUniqueName(t *testing.T) {
	n, err := UniqueName("TestFoo/sub case #1", 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(n) > 20 || !strings.HasPrefix(n, "testfoo_sub_") {
		t.Fatalf("UniqueName = %q", n)
	}
	n, _ = UniqueName("9lives", 48)
	if n[0] != 't' {
		t.Fatalf("a name must start with a letter: %q", n)
	}
}

func TestWithSearchPath(t *testing.T) {
	got := WithSearchPath("postgres://u:p@h:5432/db?sslmode=disable", "s1")
	if !strings.Contains(got, "options=-c%20search_path%3Ds1") || !strings.Contains(got, "sslmode=disable") {
		t.Fatalf("WithSearchPath = %s", got)
	}
}

// testKeyID names the one tenant key testKeys hold.
const testKeyID = "k-test"

// staticKeys is a KeySource holding one tenant's key.
type staticKeys []byte

func (k staticKeys) Valid(context.Context) (map[string][]signingkey.Key, []signingkey.Unopened, error) {
	return map[string][]signingkey.Key{"acme": {{Tenant: "acme", ID: testKeyID, Secret: k}}}, nil, nil
}

func testKeys(secret []byte) *Keys { return NewKeys(staticKeys(secret)) }

// post sends one firing to the sink as a worker would, signed by its
// tenant's key.
func post(t *testing.T, s *Sink, secret []byte, exec, job uuid.UUID, slot time.Time, fence int64, key string) {
	t.Helper()
	body := []byte(`{"x":1}`)
	req, err := http.NewRequest(http.MethodPost, s.URL(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key == "" {
		key = exec.String()
	}
	req.Header.Set(firing.HeaderIdempotencyKey, key)
	req.Header.Set(firing.HeaderExecutionID, exec.String())
	req.Header.Set(firing.HeaderJobID, job.String())
	req.Header.Set(firing.HeaderScheduledAt, slot.Format(time.RFC3339Nano))
	req.Header.Set(firing.HeaderFenceToken, strconv.FormatInt(fence, 10))
	req.Header.Set(firing.HeaderAttempt, "1")
	req.Header.Set(firing.HeaderSignature, signature.SignKeys([]signature.Key{{ID: testKeyID, Secret: secret}}, time.Now(), exec.String(), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sink answered %s", resp.Status)
	}
}

func TestSinkRecordsAndAnalyzes(t *testing.T) {
	secret := []byte("s3cret")
	s, err := NewSink(testKeys(secret))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	job := uuid.Must(uuid.NewV7())
	slot := time.Now().Add(-time.Second).Truncate(time.Second).UTC()
	want := Expected{}
	for i := range 3 {
		at := slot.Add(time.Duration(i) * time.Second)
		want[firing.ExecutionID(job, at)] = Slot{JobID: job, Scheduled: at, FireAt: at, Via: ViaHTTP}
	}
	e0 := firing.ExecutionID(job, slot)
	e1 := firing.ExecutionID(job, slot.Add(time.Second))
	post(t, s, secret, e0, job, slot, 10, "")
	post(t, s, secret, e0, job, slot, 11, "")                           // a raw duplicate, new fence
	post(t, s, secret, e1, job, slot.Add(time.Second), 11, "")          // fence reused
	other := uuid.Must(uuid.NewV7())                                    // the same slot under another id:
	post(t, s, secret, other, job, slot, 12, "")                        // unexpected, and a duplicate effect
	post(t, s, []byte("wrong"), e1, job, slot.Add(time.Second), 13, "") // bad signature

	if distinct, raw := s.Counts(); distinct != 3 || raw != 5 {
		t.Fatalf("Counts = %d distinct, %d raw; want 3, 5", distinct, raw)
	}
	if m := s.Missing(want); m != 1 {
		t.Fatalf("Missing = %d, want 1", m)
	}
	a := Analyze(want, s.Deliveries(), nil)
	if a.Expected != 3 || a.Arrived != 2 || a.Missing != 1 || a.Raw != 4 || a.RawDuplicates != 2 ||
		a.DuplicateEffects != 1 || a.Unexpected != 1 || a.Invalid != 1 || a.FenceReuse != 1 || a.Mismatched != 0 {
		t.Fatalf("Analyze = %+v", a)
	}
	if a.Clean() {
		t.Fatal("a lossy analysis says clean")
	}
	// The missing slot (the third) is named among the problems.
	e2 := firing.ExecutionID(job, slot.Add(2*time.Second))
	if !slices.ContainsFunc(a.Problems, func(p string) bool {
		return strings.Contains(p, e2.String()+" (job") && strings.Contains(p, "never arrived")
	}) {
		t.Fatalf("problems do not name the missing execution %s: %q", e2, a.Problems)
	}
	if len(a.Lateness) != 2 || a.Lateness[0] > a.Lateness[1] {
		t.Fatalf("lateness = %v", a.Lateness)
	}
	ignored := Analyze(want, s.Deliveries(), func(d Delivery) bool { return d.ExecutionID == other })
	if ignored.Unexpected != 0 || ignored.DuplicateEffects != 0 {
		t.Fatalf("ignored deliveries counted: %+v", ignored)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := s.Await(ctx, want, 0); err == nil || !strings.Contains(err.Error(), "1 of 3") {
		t.Fatalf("Await = %v, want 1 of 3 missing", err)
	}
}

func TestSummary(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 1000; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := Summarize(ds)
	if s.N != 1000 || s.P50 != 500*time.Millisecond || s.P99 != 990*time.Millisecond || s.P999 != 999*time.Millisecond || s.Max != time.Second {
		t.Fatalf("Summarize = %+v", s)
	}
	if (Summary{}).String() != "no deliveries" {
		t.Fatal("empty summary")
	}
}

func TestHistogram(t *testing.T) {
	const text = `# TYPE lat histogram
lat_bucket{stage="timer",le="0.001"} 10
lat_bucket{stage="timer",le="0.01"} 90
lat_bucket{stage="timer",le="+Inf"} 100
lat_sum{stage="timer"} 0.5
lat_count{stage="timer"} 100
lat_bucket{stage="target",le="0.001"} 0
lat_bucket{stage="target",le="0.01"} 0
lat_bucket{stage="target",le="+Inf"} 1
lat_sum{stage="target"} 3
lat_count{stage="target"} 1
# TYPE up gauge
up{svc="a"} 1
up{svc="b"} 1
`
	m, err := ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.Value("up"); !ok || v != 2 {
		t.Fatalf("up = %v %v", v, ok)
	}
	if v, ok := m.Value("up", "svc", "a"); !ok || v != 1 {
		t.Fatalf("up{svc=a} = %v %v", v, ok)
	}
	if by := m.ByLabel("up", "svc"); len(by) != 2 || by["a"] != 1 || by["b"] != 1 {
		t.Fatalf("up by svc = %v", by)
	}
	if by := m.ByLabel("missing", "svc"); len(by) != 0 {
		t.Fatalf("a missing metric by label = %v", by)
	}
	h, ok := m.Histogram("lat", "stage", "timer")
	if !ok || h.Count != 100 || h.Mean() != 0.005 {
		t.Fatalf("histogram = %+v", h)
	}
	// 50th of 100: inside the second bucket (10..90 over 0.001..0.01).
	if q := h.Quantile(0.5); q < 0.0055 || q > 0.0057 {
		t.Fatalf("p50 = %v", q)
	}
	if q := h.Quantile(0.99); q != 0.01 {
		t.Fatalf("p99 above the last finite bound = %v, want that bound", q)
	}
	all, _ := m.Histogram("lat")
	if all.Count != 101 {
		t.Fatalf("merged count = %d", all.Count)
	}
	d := h.Sub(Histogram{Count: 10, Sum: 0.01, Bounds: h.Bounds, Counts: []uint64{10, 10, 10}})
	if d.Count != 90 || d.Counts[0] != 0 || d.Counts[1] != 80 {
		t.Fatalf("Sub = %+v", d)
	}
	if sum := (Histogram{}).Add(h).Add(h); sum.Count != 200 || sum.Counts[1] != 180 || sum.Sum != 1 {
		t.Fatalf("Add = %+v", sum)
	}
}

func TestReadUsage(t *testing.T) {
	u0, err := ReadUsage(os.Getpid(), true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if u0.RSS <= 0 || u0.PeakRSS < u0.RSS {
		t.Fatalf("usage = %+v", u0)
	}
	deadline := time.Now().Add(200 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	u1, err := ReadUsage(os.Getpid(), false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c := u1.Cores(u0); c <= 0 || x == 0 {
		t.Fatalf("a busy loop used %v cores", c)
	}
}

// TestJobRowIsWhatTheAPIStores checks the bulk row against the api's
// rules: validated, defaults filled, spec without next_fire_time,
// next_fire_at the first slot after now.
func TestJobRowIsWhatTheAPIStores(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 500, time.UTC)
	job := &sundialv1.Job{
		Name:      "idle",
		Payload:   []byte(`{}`),
		MaxJitter: durationpb.New(time.Second),
		Schedule:  &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 9 * * *"}},
		Target:    &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://example.com/x"}}},
	}
	row, err := JobRow(job, "acme", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(row) != len(jobRowColumns) {
		t.Fatalf("%d values for %d columns", len(row), len(jobRowColumns))
	}
	id := row[0].(uuid.UUID)
	if id.Version() != 7 || row[1] != "acme" || row[6] != "active" || row[7] != int64(1) || row[8] != int16(firing.Partition(id)) {
		t.Fatalf("row = %v", row)
	}
	if next := row[9].(time.Time); !next.Equal(time.Date(2026, 5, 2, 9, 0, 0, 0, time.UTC)) {
		t.Fatalf("next_fire_at = %s", next)
	}
	stored := &sundialv1.Job{}
	if err := proto.Unmarshal(row[4].([]byte), stored); err != nil {
		t.Fatal(err)
	}
	if stored.NextFireTime != nil {
		t.Fatal("spec carries next_fire_time")
	}
	if stored.GetPriority() != jobspec.DefaultPriority || stored.GetSchedule().GetTimezone() != jobspec.DefaultTimezone ||
		stored.GetTarget().GetHttp().GetMethod() != jobspec.DefaultHTTPMethod {
		t.Fatalf("defaults not filled: %v", stored)
	}
	if stored.GetId() != id.String() || stored.GetTenant() != "acme" || stored.GetVersion() != 1 ||
		!stored.GetCreateTime().AsTime().Equal(now) {
		t.Fatalf("identity = %v", stored)
	}
	bad := &sundialv1.Job{Name: "bad", Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(now.Add(-time.Hour))}}}
	if _, err := JobRow(bad, "acme", now); err == nil {
		t.Fatal("a job without target (or a past one-off) was accepted")
	}
}

// A hanging sink records each request on arrival and answers only when the
// hang ends, or not at all to a client that gives up first.
func TestSinkHang(t *testing.T) {
	secret := []byte("s3cret")
	s, err := NewSink(testKeys(secret))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	job := uuid.Must(uuid.NewV7())
	slot := time.Now().Truncate(time.Second).UTC()
	s.Hang(time.Now().Add(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL(), strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(firing.HeaderExecutionID, firing.ExecutionID(job, slot).String())
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a hanging sink answered %s", resp.Status)
	}
	if _, raw := s.Counts(); raw != 1 {
		t.Fatalf("the hung request was not recorded: %d deliveries", raw)
	}
	s.Hang(time.Time{})
	post(t, s, secret, firing.ExecutionID(job, slot.Add(time.Second)), job, slot.Add(time.Second), 1, "")
}

// At SlowURL the sink records a request on arrival and answers it only the
// delay later (by its clock); at URL, meanwhile, it answers at once.
func TestSinkSlowURL(t *testing.T) {
	secret := []byte("s3cret")
	clk := clock.NewFake(time.Now())
	s, err := NewSink(testKeys(secret), SinkClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	job := uuid.Must(uuid.NewV7())
	slot := time.Now().Truncate(time.Second).UTC()
	answered := make(chan int, 1)
	go func() {
		resp, err := http.Post(s.SlowURL(10*time.Second), "application/json", strings.NewReader("{}"))
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	waitUntil := time.NewTimer(10 * time.Second)
	defer waitUntil.Stop()
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for _, raw := s.Counts(); raw != 1; _, raw = s.Counts() {
		select {
		case <-waitUntil.C:
			t.Fatal("the slow request was not recorded on arrival")
		case <-poll.C:
		}
	}
	post(t, s, secret, firing.ExecutionID(job, slot), job, slot, 1, "")
	select {
	case code := <-answered:
		t.Fatalf("the slow target answered %d before its delay", code)
	default:
	}
	// The handler may not have armed its timer yet: move the clock on
	// until it has, and has fired.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		clk.Advance(10 * time.Second)
		select {
		case code := <-answered:
			if code != http.StatusOK {
				t.Fatalf("the slow target answered %d after its delay, want 200", code)
			}
			return
		case <-tick.C:
		}
	}
}

// Keys verify a tenant key's signature, named by its id; a signature by
// no tenant's key (the platform's secret alone, unnamed) or by a key it
// cannot find does not verify.
func TestKeysVerifyTenantKeysOnly(t *testing.T) {
	k := testKeys([]byte("s3cret"))
	now, body := time.Now(), []byte("b")
	good := signature.SignKeys([]signature.Key{{ID: testKeyID, Secret: []byte("s3cret")}}, now, "e1", body)
	if err := k.Verify(good, "e1", body, now, time.Minute); err != nil {
		t.Fatalf("the tenant's key: %v", err)
	}
	// The tenant key beside an unnamed platform signature still verifies.
	both := signature.SignKeys([]signature.Key{{ID: testKeyID, Secret: []byte("s3cret")}, {Secret: []byte("platform")}}, now, "e1", body)
	if err := k.Verify(both, "e1", body, now, time.Minute); err != nil {
		t.Fatalf("the tenant's key beside the platform's: %v", err)
	}
	if err := k.Verify(signature.Sign([]byte("s3cret"), now, "e1", body), "e1", body, now, time.Minute); !errors.Is(err, ErrNoTenantKey) {
		t.Fatalf("an unnamed signature: %v", err)
	}
	other := signature.SignKeys([]signature.Key{{ID: "k-other", Secret: []byte("s3cret")}}, now, "e1", body)
	if err := k.Verify(other, "e1", body, now, time.Minute); !errors.Is(err, ErrNoTenantKey) {
		t.Fatalf("a key no tenant has: %v", err)
	}
}
