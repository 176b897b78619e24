package settle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/retry"
	"github.com/sundialhq/sundial/services/worker/internal/target"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// memStore records writes; failN makes the first n calls of each step fail.
type memStore struct {
	Store
	mu        sync.Mutex
	retries   []*sundialv1.Firing
	dead      []*sundialv1.DeadLetter
	completed []string
	failN     int
	calls     map[string]int
	// groups counts QueueCompletions statements.
	groups int
}

func (m *memStore) fail(step string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls == nil {
		m.calls = map[string]int{}
	}
	m.calls[step]++
	if m.calls[step] <= m.failN {
		return errors.New("postgres down")
	}
	return nil
}

func (m *memStore) InsertRetry(_ context.Context, next *sundialv1.Firing, _ []byte) error {
	if err := m.fail("retry"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retries = append(m.retries, next)
	return nil
}

func (m *memStore) UpsertDeadLetter(_ context.Context, dl *sundialv1.DeadLetter, _ []byte) (int32, time.Time, error) {
	if err := m.fail("dead"); err != nil {
		return 0, time.Time{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dead = append(m.dead, dl)
	return 2, t0.Add(-time.Hour), nil
}

func (m *memStore) QueueCompletions(_ context.Context, cs []Completion) error {
	if err := m.fail("complete"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.groups++
	for _, c := range cs {
		m.completed = append(m.completed, c.Firing.GetJobId()+" "+c.Outcome)
	}
	return nil
}

type memPub struct{ got []*sundialv1.DeadLetter }

func (p *memPub) PublishDeadLetter(_ context.Context, dl *sundialv1.DeadLetter) error {
	p.got = append(p.got, dl)
	return nil
}

func newSettler(st *memStore, pub Publisher, clk clock.Clock) *Settler {
	return New(st, pub, clk, Config{}, Metrics{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func fire() *sundialv1.Firing {
	return &sundialv1.Firing{ExecutionId: "e", JobId: "j", Tenant: "acme", Attempt: 2, FirstAttempt: 1, JobVersion: 3,
		ScheduledTime: timestamppb.New(t0), FireTime: timestamppb.New(t0), Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE}
}

func TestSettleRetryWritesTheNextAttempt(t *testing.T) {
	st := &memStore{}
	s := newSettler(st, nil, clock.NewFake(t0))
	d := retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED, Class: "http_5xx", NextFire: t0.Add(4 * time.Second)}
	out, err := s.Settle(context.Background(), fire(), d, target.Result{HTTPStatus: 503})
	if err != nil {
		t.Fatal(err)
	}
	n := out.Next
	if len(st.retries) != 1 || n != st.retries[0] {
		t.Fatalf("retries %v", st.retries)
	}
	if n.GetAttempt() != 3 || n.GetFirstAttempt() != 1 || n.GetExecutionId() != "e" || !n.GetFireTime().AsTime().Equal(t0.Add(4*time.Second)) ||
		n.GetOrigin() != sundialv1.FiringOrigin_FIRING_ORIGIN_RETRY || !n.GetScheduledTime().AsTime().Equal(t0) || !n.GetStagedTime().AsTime().Equal(t0) {
		t.Fatalf("next attempt %v", n)
	}
}

func TestSettleDeadLetterAndLastSlot(t *testing.T) {
	st, pub := &memStore{}, &memPub{}
	s := newSettler(st, pub, clock.NewFake(t0))
	f := fire()
	f.LastSlot = true
	d := retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD, Class: "http_4xx", Attempts: 2, Reason: "permanent"}
	out, err := s.Settle(context.Background(), f, d, target.Result{HTTPStatus: 404, Err: errors.New("status 404")})
	if err != nil {
		t.Fatal(err)
	}
	dl := out.DeadLetter
	if len(pub.got) != 1 || pub.got[0] != dl || len(st.dead) != 1 {
		t.Fatalf("dead letters: table %d, topic %d", len(st.dead), len(pub.got))
	}
	if dl.GetErrorClass() != "http_4xx" || dl.GetHttpStatus() != 404 || dl.GetAttempts() != 2 || dl.GetLastError() != "status 404" ||
		dl.GetFiring().GetExecutionId() != "e" || !dl.GetDeadTime().AsTime().Equal(t0) || dl.GetRedriveCount() != 2 ||
		!dl.GetRedriveTime().AsTime().Equal(t0.Add(-time.Hour)) {
		t.Fatalf("dead letter %v", dl)
	}
	if len(st.completed) != 1 || st.completed[0] != "j dead" {
		t.Fatalf("completion %v", st.completed)
	}
	// A success of a last slot completes too; of another slot, nothing.
	out, _ = s.Settle(context.Background(), f, retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED}, target.Result{OK: true})
	if len(st.completed) != 2 || st.completed[1] != "j succeeded" {
		t.Fatalf("completion %v", st.completed)
	}
	f.LastSlot = false
	if _, err := s.Settle(context.Background(), f, retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED}, target.Result{OK: true}); err != nil || len(st.completed) != 2 {
		t.Fatal("completed a job on an ordinary slot")
	}
}

// A failing write is tried again until it succeeds; with the context ended
// it is tried once more and the error returned.
// armedClock signals each timer it makes, so the test advances the fake
// clock only once the settler is waiting on it.
type armedClock struct {
	*clock.Fake
	armed chan struct{}
}

func (c armedClock) NewTimer(d time.Duration) clock.Timer {
	t := c.Fake.NewTimer(d)
	c.armed <- struct{}{}
	return t
}

// A failing write is tried again until it succeeds; with the context ended
// it is tried once more and the error returned.
func TestSettleRetriesWrites(t *testing.T) {
	st := &memStore{failN: 3}
	clk := armedClock{clock.NewFake(t0), make(chan struct{})}
	s := newSettler(st, nil, clk)
	d := retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED, NextFire: t0.Add(time.Second)}
	done := make(chan error, 1)
	go func() {
		_, err := s.Settle(context.Background(), fire(), d, target.Result{})
		done <- err
	}()
	for range 3 {
		<-clk.armed
		clk.Advance(10 * time.Second)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st.calls["retry"] != 4 || len(st.retries) != 1 {
		t.Fatalf("calls %v, retries %d", st.calls, len(st.retries))
	}

	st2 := &memStore{failN: 100}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := newSettler(st2, nil, clock.NewFake(t0)).Settle(ctx, fire(), d, target.Result{}); err == nil || st2.calls["retry"] != 1 {
		t.Fatalf("stopping: err %v after %d calls, want an error after one", err, st2.calls["retry"])
	}
}

// A group of last slots queues its jobs for completion with one statement;
// when the queueing fails, the last slots report it and the others do not.
func TestSettleManyQueuesCompletionsInOneStatement(t *testing.T) {
	st := &memStore{}
	s := New(st, nil, clock.NewFake(t0), Config{}, Metrics{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var as []Attempt
	for _, id := range []string{"j1", "j2", "j3"} {
		as = append(as, Attempt{
			Firing:   &sundialv1.Firing{ExecutionId: "e-" + id, JobId: id, Attempt: 1, LastSlot: true, ScheduledTime: timestamppb.New(t0)},
			Decision: retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED},
		})
	}
	// Not a last slot: nothing to complete.
	as = append(as, Attempt{Firing: &sundialv1.Firing{ExecutionId: "e-j4", JobId: "j4", Attempt: 1}, Decision: retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED}})
	out := s.SettleMany(context.Background(), as)
	if st.groups != 1 || len(st.completed) != 3 {
		t.Fatalf("%d statements completing %v, want one for the three last slots", st.groups, st.completed)
	}
	if want := []string{"j1 succeeded", "j2 succeeded", "j3 succeeded"}; !slices.Equal(st.completed, want) {
		t.Fatalf("queued %v, want %v", st.completed, want)
	}
	for i, o := range out {
		if o.Err != nil {
			t.Fatalf("attempt %d: %+v", i, o)
		}
	}
	// The queueing fails for good (the context ends): every last slot of
	// the group reports it, so none is marked finished; the others are.
	st2 := &memStore{failN: 1 << 30}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out = New(st2, nil, clock.NewFake(t0), Config{}, Metrics{}, slog.New(slog.NewTextHandler(io.Discard, nil))).SettleMany(ctx, as)
	for i, o := range out {
		if (o.Err != nil) != (i < 3) {
			t.Fatalf("attempt %d with the queue down: %+v", i, o)
		}
	}
}
