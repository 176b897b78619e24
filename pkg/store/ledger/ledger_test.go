package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gocql/gocql"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestMonthBuckets(t *testing.T) {
	for _, tc := range []struct {
		at   time.Time
		want month
	}{
		{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 202601},
		{time.Date(2025, 12, 31, 23, 59, 59, 0, time.UTC), 202512},
		// Buckets are UTC months whatever the instant's zone.
		{time.Date(2026, 3, 1, 0, 30, 0, 0, time.FixedZone("UTC+1", 3600)), 202602},
	} {
		if got := monthOf(tc.at); got != tc.want {
			t.Errorf("monthOf(%s) = %d, want %d", tc.at, got, tc.want)
		}
	}
	if month(202601).prev() != 202512 || month(202612).prev() != 202611 {
		t.Fatal("prev crosses years wrongly")
	}
}

func TestDayBucketsAndPartitionKey(t *testing.T) {
	at := time.Date(2026, 3, 1, 0, 30, 0, 0, time.FixedZone("x", 3600)) // 2026-02-28 23:30 UTC
	if d := dayOf(at); d != 20260228 || d.prev() != 20260227 || day(20260301).prev() != 20260228 || day(20260101).prev() != 20251231 {
		t.Fatalf("dayOf(%s) = %d", at, d)
	}
	if !day(20240229).valid() || day(20250229).valid() || day(202402).valid() {
		t.Fatal("day validity")
	}
	// The partition key is stable (FNV-1a) and differs by day.
	a := &sundialv1.ExecutionAttempt{JobId: "job-a", ScheduledTime: timestamppb.New(at)}
	b := &sundialv1.ExecutionAttempt{JobId: "job-a", ScheduledTime: timestamppb.New(at.Add(time.Hour))}
	if PartitionKey(a) != 20260228*Buckets+uint64(bucketOf("job-a")) || PartitionKey(a) == PartitionKey(b) {
		t.Fatalf("PartitionKey: %d, %d", PartitionKey(a), PartitionKey(b))
	}
	// The bucket is part of the stored layout: a job's rows must stay in
	// the bucket they were written to across releases.
	for id, want := range map[string]int{"job-a": 38, "0192a3b4-c5d6-7e8f-9a0b-1c2d3e4f5a6b": 21, "": 5} {
		if got := bucketOf(id); got != want {
			t.Fatalf("bucketOf(%q) = %d, want %d (FNV-1a mod %d)", id, got, want, Buckets)
		}
	}
}

func TestCursorRoundTripAndBinding(t *testing.T) {
	c := cursor{Job: jobHash("job-a"), Part: 20260302, Stop: 20251201, Start: 20260302,
		Last: &cursorKey{ScheduledMs: 1234, ExecutionID: "e", Attempt: 2, Fence: 7, LiveFence: 9}}
	tok := c.encode()
	got, err := decodeCursor(tok, "job-a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Part != c.Part || got.Stop != c.Stop || got.Start != c.Start || *got.Last != *c.Last {
		t.Fatalf("round trip: got %+v, want %+v", got, c)
	}
	for name, tok := range map[string]string{
		"other job":        tok,
		"not b64":          "!!!",
		"not json":         "bm90IGpzb24",
		"bad range":        cursor{Job: jobHash("job-b"), Part: 20251201, Stop: 20260301}.encode(),
		"bad day":          cursor{Job: jobHash("job-b"), Part: 20260231, Stop: 20260201}.encode(),
		"month as day":     cursor{Job: jobHash("job-b"), Part: 202603, Stop: 202512}.encode(),
		"bad legacy month": cursor{Job: jobHash("job-b"), Legacy: true, Part: 202613, Stop: 202603}.encode(),
	} {
		if _, err := decodeCursor(tok, "job-b"); !errors.Is(err, ErrInvalidPageToken) {
			t.Errorf("%s: err = %v, want ErrInvalidPageToken", name, err)
		}
	}
}

func TestRecordValidatesBeforeTouchingCassandra(t *testing.T) {
	w := NewWriter(nil, "ks") // a nil session panics if reached
	ok := func() *sundialv1.ExecutionAttempt {
		return &sundialv1.ExecutionAttempt{ExecutionId: "e", JobId: "j", Attempt: 1,
			Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, ScheduledTime: timestamppb.Now()}
	}
	for field, mutate := range map[string]func(*sundialv1.ExecutionAttempt){
		"execution_id":   func(a *sundialv1.ExecutionAttempt) { a.ExecutionId = "" },
		"job_id":         func(a *sundialv1.ExecutionAttempt) { a.JobId = "" },
		"attempt":        func(a *sundialv1.ExecutionAttempt) { a.Attempt = 0 },
		"scheduled_time": func(a *sundialv1.ExecutionAttempt) { a.ScheduledTime = nil },
		"status":         func(a *sundialv1.ExecutionAttempt) { a.Status = 0 },
		"fence_token":    func(a *sundialv1.ExecutionAttempt) { a.FenceToken = -1 },
	} {
		a := ok()
		mutate(a)
		err := w.Record(context.Background(), a)
		if !errors.Is(err, ErrInvalidAttempt) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err = %v, want ErrInvalidAttempt naming the field", field, err)
		}
	}
}

// One worker's transitions of one attempt must order by status, not by the
// moment they were written.
func TestWriteTimestampOrdersTransitions(t *testing.T) {
	fire := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r, err := rowFrom(&sundialv1.ExecutionAttempt{ExecutionId: "e", JobId: "j", Attempt: 1,
		Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, ScheduledTime: timestamppb.New(fire.Add(-time.Second)),
		FireTime: timestamppb.New(fire)})
	if err != nil {
		t.Fatal(err)
	}
	order := []sundialv1.ExecutionStatus{
		sundialv1.ExecutionStatus_EXECUTION_STATUS_SCHEDULED,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_QUEUED,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD,
	}
	for i := 1; i < len(order); i++ {
		if r.writeTimestamp(order[i]) <= r.writeTimestamp(order[i-1]) {
			t.Errorf("%s does not follow %s", order[i], order[i-1])
		}
	}
	// Anchored on the fire instant, so time-window compaction sees real time.
	if d := r.writeTimestamp(order[0]) - fire.UnixMicro(); d < 0 || d > 10 {
		t.Errorf("timestamp %d µs away from the fire instant", d)
	}
}

func TestClipKeepsUTF8(t *testing.T) {
	s := strings.Repeat("é", MaxTextBytes) // 2 bytes each
	got := clip(s)
	if len(got) > MaxTextBytes || !utf8.ValidString(got) {
		t.Fatalf("clip: %d bytes, valid=%v", len(got), utf8.ValidString(got))
	}
}

// failingBatch fails the first n batches with err, then passes through.
type failingBatch struct {
	Session
	err   error
	n     int
	calls int
}

func (f *failingBatch) ExecBatch(ctx context.Context, b Batch) error {
	f.calls++
	if f.calls <= f.n {
		return f.err
	}
	return nil
}

func TestRetryingRetriesTransientIdempotentWrites(t *testing.T) {
	fake := clock.NewFake(time.Unix(0, 0))
	p := RetryPolicy{Attempts: 3, Backoff: time.Millisecond, MaxBackoff: time.Millisecond, Clock: autoAdvance{fake}}
	timeout := &gocql.RequestErrWriteTimeout{}

	inner := &failingBatch{err: timeout, n: 2}
	if err := Retrying(inner, p).ExecBatch(context.Background(), Batch{Idempotent: true}); err != nil || inner.calls != 3 {
		t.Fatalf("err=%v calls=%d, want success on the third try", err, inner.calls)
	}
	inner = &failingBatch{err: timeout, n: 5}
	if err := Retrying(inner, p).ExecBatch(context.Background(), Batch{Idempotent: true}); !errors.Is(err, timeout) || inner.calls != 3 {
		t.Fatalf("err=%v calls=%d, want the timeout after 3 tries", err, inner.calls)
	}
	inner = &failingBatch{err: timeout, n: 5}
	if err := Retrying(inner, p).ExecBatch(context.Background(), Batch{}); err == nil || inner.calls != 1 {
		t.Fatalf("non-idempotent batch retried: calls=%d", inner.calls)
	}
	// A node killed under the request: the socket's own errors, as the
	// driver returns them, are retried too.
	for _, broken := range []error{
		&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)},
		&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)},
		fmt.Errorf("gocql: reading frame: %w", io.ErrUnexpectedEOF),
	} {
		inner = &failingBatch{err: broken, n: 2}
		if err := Retrying(inner, p).ExecBatch(context.Background(), Batch{Idempotent: true}); err != nil || inner.calls != 3 {
			t.Fatalf("%v: err=%v calls=%d, want success on the third try", broken, err, inner.calls)
		}
	}
	inner = &failingBatch{err: errors.New("syntax error"), n: 5}
	if err := Retrying(inner, p).ExecBatch(context.Background(), Batch{Idempotent: true}); err == nil || inner.calls != 1 {
		t.Fatalf("permanent error retried: calls=%d", inner.calls)
	}
}

// autoAdvance is a fake clock whose timers fire at once, so backoff waits
// take no real time.
type autoAdvance struct{ *clock.Fake }

func (a autoAdvance) NewTimer(d time.Duration) clock.Timer {
	t := a.Fake.NewTimer(d)
	a.Advance(d)
	return t
}

func TestInstrumentedSharesARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := Instrumented(&failingBatch{n: 1, err: errors.New("boom")}, reg)
	b := Instrumented(&failingBatch{}, reg) // must not panic
	_ = a.ExecBatch(context.Background(), Batch{})
	_ = b.ExecBatch(context.Background(), Batch{})
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 2 {
		t.Fatalf("gathered %v (%v), want one histogram with ok and error series", mfs, err)
	}
}

func TestHourBuckets(t *testing.T) {
	at := time.Date(2026, 3, 1, 0, 30, 0, 0, time.UTC)
	h := hourOf(at)
	if h != 2026030100 || !h.valid() {
		t.Fatalf("hourOf = %d", h)
	}
	if p := h.prev(); p != 2026022823 {
		t.Fatalf("prev = %d", p)
	}
	if hour(2026030124).valid() || hour(2026023100).valid() {
		t.Fatal("an hour past 23 or a bad date is valid")
	}
}

func TestTenantCursorIsBoundToItsQuery(t *testing.T) {
	q := TenantQuery{Tenant: "acme", From: time.Unix(0, 0), To: time.Unix(3600, 0)}
	tok := tenantCursor{Filter: q.hash(), FromMs: 0, ToMs: 3600_000, Part: 1970010100, Stop: 1970010100}.encode()
	if _, err := decodeTenantCursor(tok, q.hash()); err != nil {
		t.Fatal(err)
	}
	other := q
	other.Statuses = []sundialv1.ExecutionStatus{sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED}
	if _, err := decodeTenantCursor(tok, other.hash()); !errors.Is(err, ErrInvalidPageToken) {
		t.Fatalf("another filter: %v", err)
	}
	bad := tenantCursor{Filter: q.hash(), FromMs: 0, ToMs: 3600_000, Part: 1970010100, Stop: 1970010101}.encode()
	if _, err := decodeTenantCursor(bad, q.hash()); !errors.Is(err, ErrInvalidPageToken) {
		t.Fatalf("part before stop: %v", err)
	}
	if _, err := decodeTenantCursor("!!", q.hash()); !errors.Is(err, ErrInvalidPageToken) {
		t.Fatalf("garbage: %v", err)
	}
}
