//go:build integration

package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// testLedger connects to the test Cassandra with the ledger's own settings
// and migrates a keyspace of the test's own (testkit/testinfra creates it and
// drops it when the test ends).
func testLedger(t testing.TB) (ledger.Session, string) {
	t.Helper()
	ks := testinfra.CassandraKeyspace(t)
	s, err := ledger.Connect(ledger.ConnectConfig{Hosts: testinfra.CassandraHosts(t), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close) // runs before the keyspace is dropped
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := ledger.Migrate(ctx, s, ks, ""); err != nil {
		t.Fatal(err)
	}
	return s, ks
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

const (
	running   = sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
	succeeded = sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED
	failed    = sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED
	fenced    = sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED
	scheduled = sundialv1.ExecutionStatus_EXECUTION_STATUS_SCHEDULED
)

// attempt builds an attempt of job's slot at sched.
func attempt(job uuid.UUID, sched time.Time, n int32, fence int64, st sundialv1.ExecutionStatus) *sundialv1.ExecutionAttempt {
	return &sundialv1.ExecutionAttempt{
		ExecutionId:   firing.ExecutionID(job, sched).String(),
		JobId:         job.String(),
		Tenant:        "acme",
		Attempt:       n,
		Status:        st,
		ScheduledTime: timestamppb.New(sched),
		FireTime:      timestamppb.New(sched.Add(250 * time.Millisecond)),
		FenceToken:    fence,
		Worker:        "worker-1",
		JobVersion:    3,
	}
}

func TestRoundTrip(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	w, r := ledger.NewWriter(s, ks), ledger.NewReader(s, ks)
	job := uuid.New()
	sched := time.Now().UTC().Truncate(time.Second)

	run := attempt(job, sched, 1, 42, running)
	run.StartedTime = timestamppb.New(sched.Add(251 * time.Millisecond))
	run.Lateness = durationpb.New(1234567 * time.Nanosecond)
	run.CatchUp = true
	if err := w.Record(ctx, run); err != nil {
		t.Fatal(err)
	}
	// The outcome carries only what changed; the rest stays from RUNNING.
	done := attempt(job, sched, 1, 42, succeeded)
	done.Worker, done.Tenant, done.JobVersion = "", "", 0
	done.FinishedTime = timestamppb.New(sched.Add(400 * time.Millisecond))
	done.Duration = durationpb.New(149 * time.Millisecond)
	done.HttpStatus = 204
	done.ResponseExcerpt = "ok"
	if err := w.Record(ctx, done); err != nil {
		t.Fatal(err)
	}

	want := proto.Clone(run).(*sundialv1.ExecutionAttempt)
	want.Status = succeeded
	want.FinishedTime, want.Duration, want.HttpStatus, want.ResponseExcerpt = done.FinishedTime, done.Duration, 204, "ok"

	got, err := r.GetExecution(ctx, run.ExecutionId)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !proto.Equal(got[0], want) {
		t.Fatalf("GetExecution:\n got %v\nwant %v", got, want)
	}
	list, next, err := r.ListByJob(ctx, job.String(), 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !proto.Equal(list[0], want) || next != "" {
		t.Fatalf("ListByJob: %v next=%q", list, next)
	}
	if _, err := r.GetExecution(ctx, uuid.NewString()); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("missing execution: %v, want ErrNotFound", err)
	}
}

// A final record that reaches Cassandra before RUNNING (two goroutines, a
// retried write) still wins: transitions order by status, not arrival.
func TestTransitionsOrderByStatusNotArrival(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	w, r := ledger.NewWriter(s, ks), ledger.NewReader(s, ks)
	job := uuid.New()
	sched := time.Now().UTC().Truncate(time.Second)
	for _, st := range []sundialv1.ExecutionStatus{failed, running} {
		if err := w.Record(ctx, attempt(job, sched, 1, 9, st)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.GetExecution(ctx, firing.ExecutionID(job, sched).String())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Status != failed {
		t.Fatalf("got %v, want one FAILED row", got)
	}
}

func TestFencing(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	w, r := ledger.NewWriter(s, ks), ledger.NewReader(s, ks)
	job := uuid.New()
	sched := time.Now().UTC().Truncate(time.Second)
	exec := firing.ExecutionID(job, sched).String()

	// Worker A leases (fence 100) and starts; its lease expires; worker B
	// takes over (fence 200) and succeeds; A finishes late and records.
	steps := []struct {
		fence  int64
		status sundialv1.ExecutionStatus
		worker string
		want   error
	}{
		{100, running, "a", nil},
		{200, running, "b", nil},
		{200, succeeded, "b", nil},
		{100, failed, "a", ledger.ErrFenced},
	}
	for _, st := range steps {
		a := attempt(job, sched, 1, st.fence, st.status)
		a.Worker = st.worker
		if err := w.Record(ctx, a); !errors.Is(err, st.want) || (st.want == nil && err != nil) {
			t.Fatalf("record fence %d %s: err = %v, want %v", st.fence, st.status, err, st.want)
		}
	}
	// Without the check the stale write is still harmless, just unreported:
	// from a writer built without it, and from RecordHeld (a caller wrongly
	// claiming its fence is current cannot overwrite the newer row).
	stale := attempt(job, sched, 1, 150, failed)
	if err := ledger.NewWriter(s, ks, ledger.WithoutFenceCheck()).Record(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if err := w.RecordHeld(ctx, attempt(job, sched, 1, 100, failed)); err != nil {
		t.Fatal(err)
	}

	check := func(name string, got []*sundialv1.ExecutionAttempt) {
		t.Helper()
		if len(got) != 3 {
			t.Fatalf("%s: %d rows, want 3: %v", name, len(got), got)
		}
		if got[0].FenceToken != 200 || got[0].Status != succeeded || got[0].Worker != "b" {
			t.Errorf("%s: live row %v, want fence 200 SUCCEEDED by b", name, got[0])
		}
		for i, f := range []int64{150, 100} {
			g := got[i+1]
			if g.FenceToken != f || g.Status != fenced || !strings.Contains(g.Reason, "superseded by fence 200; recorded EXECUTION_STATUS_FAILED") {
				t.Errorf("%s: row %d = %v, want fence %d reported FENCED", name, i+1, g, f)
			}
		}
	}
	got, err := r.GetExecution(ctx, exec)
	if err != nil {
		t.Fatal(err)
	}
	check("GetExecution", got)
	// Page size 1 puts every page boundary inside the attempt's group: the
	// token must carry the live fence across.
	var all []*sundialv1.ExecutionAttempt
	tok := ""
	for range 10 {
		page, next, err := r.ListByJob(ctx, job.String(), 1, tok)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if tok = next; tok == "" {
			break
		}
	}
	check("ListByJob", all)
}

// A record made before any lease (fence 0, e.g. a staged SCHEDULED state) is
// an earlier state of the attempt, not a stale holder: hidden once a leased
// record exists.
func TestUnleasedRecordHiddenBehindLeased(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	w, r := ledger.NewWriter(s, ks), ledger.NewReader(s, ks)
	job := uuid.New()
	sched := time.Now().UTC().Truncate(time.Second)
	if err := w.Record(ctx, attempt(job, sched, 1, 0, scheduled)); err != nil {
		t.Fatal(err)
	}
	if err := w.Record(ctx, attempt(job, sched, 1, 5, succeeded)); err != nil {
		t.Fatal(err)
	}
	got, err := r.GetExecution(ctx, firing.ExecutionID(job, sched).String())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Status != succeeded {
		t.Fatalf("got %v, want only the leased SUCCEEDED row", got)
	}
}

func TestListByJobPagesNewestFirstAcrossDays(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	w := ledger.NewWriter(s, ks)
	// Late on the last day of March: April's first slots were already
	// recorded (prefetched), and 90 days back reaches December.
	now := time.Date(2026, 3, 31, 23, 59, 0, 0, time.UTC)
	r := ledger.NewReader(s, ks, ledger.WithClock(clock.NewFake(now)))
	job, other := uuid.New(), uuid.New()

	slots := []time.Time{
		time.Date(2026, 4, 1, 0, 0, 30, 0, time.UTC),
		time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 2, 14, 9, 0, 0, 0, time.UTC),
		// January is empty: the walk must step over it.
		time.Date(2025, 12, 31, 23, 59, 59, 0, time.UTC),
		// The last day of the lookback (now - 90 days is December 31st).
		time.Date(2025, 12, 31, 0, 0, 0, 0, time.UTC),
	}
	var want []string // newest first; attempt 2 before attempt 1 of a slot
	for _, sl := range slots {
		attempts := int32(1)
		if sl.Month() == time.February {
			attempts = 2
		}
		for n := attempts; n >= 1; n-- {
			a := attempt(job, sl, n, int64(n), failed)
			want = append(want, fmt.Sprintf("%s#%d", a.ExecutionId, n))
			if err := w.Record(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Beyond the lookback (December 30th) and another job's rows: never
	// listed.
	for _, a := range []*sundialv1.ExecutionAttempt{
		attempt(job, time.Date(2025, 12, 30, 23, 0, 0, 0, time.UTC), 1, 1, failed),
		attempt(other, slots[1], 1, 1, failed),
	} {
		if err := w.Record(ctx, a); err != nil {
			t.Fatal(err)
		}
	}

	for _, size := range []int{1, 2, 3, 50} {
		var got []string
		tok, pages := "", 0
		for {
			page, next, err := r.ListByJob(ctx, job.String(), size, tok)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(page) > size {
				t.Fatalf("size %d: page of %d", size, len(page))
			}
			for _, a := range page {
				got = append(got, fmt.Sprintf("%s#%d", a.ExecutionId, a.Attempt))
			}
			if tok = next; tok == "" {
				break
			}
			if pages > 20 {
				t.Fatal("paging does not end")
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("size %d: order\n got %v\nwant %v", size, got, want)
		}
	}
	if _, _, err := r.ListByJob(ctx, other.String(), 1, mustToken(t, r, job)); !errors.Is(err, ledger.ErrInvalidPageToken) {
		t.Fatalf("token of another job: %v", err)
	}
}

func mustToken(t *testing.T, r *ledger.Reader, job uuid.UUID) string {
	_, tok, err := r.ListByJob(context.Background(), job.String(), 1, "")
	if err != nil || tok == "" {
		t.Fatalf("no token: %v", err)
	}
	return tok
}

func TestRowsExpire(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	job := uuid.New()
	sched := time.Now().UTC().Truncate(time.Second)
	a := attempt(job, sched, 1, 1, running)
	if err := ledger.NewWriter(s, ks).Record(ctx, a); err != nil {
		t.Fatal(err)
	}
	for _, q := range []ledger.Statement{
		{CQL: "SELECT TTL(status) FROM " + ks + ".attempts_by_bucket WHERE job_id = ? AND execution_id = ? ALLOW FILTERING", Values: []any{a.JobId, a.ExecutionId}},
		{CQL: "SELECT TTL(job_id) FROM " + ks + ".execution_index WHERE execution_id = ? ALLOW FILTERING", Values: []any{a.ExecutionId}},
		{CQL: "SELECT TTL(status) FROM " + ks + ".executions_by_tenant WHERE execution_id = ? ALLOW FILTERING", Values: []any{a.ExecutionId}},
	} {
		it := s.Iter(ctx, q)
		var ttl int
		if !it.Scan(&ttl) {
			t.Fatalf("%s: no row", q.CQL)
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		if max := int(ledger.TTL / time.Second); ttl <= max-3600 || ttl > max {
			t.Fatalf("%s: ttl %d s, want about %d", q.CQL, ttl, max)
		}
	}
	// The table says so too, with time-window compaction.
	it := s.Iter(ctx, ledger.Statement{CQL: "SELECT default_time_to_live, compaction FROM system_schema.tables WHERE keyspace_name = ?", Values: []any{ks}})
	var (
		ttl  int
		comp map[string]string
		n    int
	)
	for it.Scan(&ttl, &comp) {
		n++
		if ttl != int(ledger.TTL/time.Second) || !strings.HasSuffix(comp["class"], "TimeWindowCompactionStrategy") {
			t.Errorf("table options: ttl %d, compaction %v", ttl, comp)
		}
	}
	if err := it.Close(); err != nil || n != 5 { // two of each layout, the by-tenant copy
		t.Fatalf("%d tables, err %v", n, err)
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	s, ks := testLedger(t)
	if err := ledger.Migrate(ctxFor(t), s, ks, ""); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if err := ledger.Migrate(ctxFor(t), s, "bad-name", ""); err == nil {
		t.Fatal("accepted a keyspace name that needs quoting")
	}
}
