//go:build e2e

package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// TestPauseAndRetryAcrossTheProcesses checks two worker behaviours through
// the four services as processes:
//
//   - pausing a job whose next firings are already in Kafka (the
//     prefetcher stages two minutes ahead and the relay publishes at once)
//     stops them within a second: the api publishes the new version to
//     Redis and the worker skips the held firings as stale;
//   - a one-off job whose target fails once is retried through the outbox
//     (worker → Postgres → relay → Kafka → worker), succeeds on its second
//     attempt, and is then completed by the worker.
func TestPauseAndRetryAcrossTheProcesses(t *testing.T) {
	t.Parallel()
	p := newPlatform(t)
	p.start("prefetcher-1", "prefetcher", "--node-id", "pf-1")
	p.start("worker-1", "worker", "--worker-id", "w1")
	s := newSink(t, p)
	ctx := ctxT(t, 5*time.Minute)
	cl := p.client()

	var mu sync.Mutex
	attempts := map[string][]string{} // execution → Sundial-Attempt of each request
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exec := r.Header.Get(firing.HeaderExecutionID)
		mu.Lock()
		attempts[exec] = append(attempts[exec], r.Header.Get(firing.HeaderAttempt))
		n := len(attempts[exec])
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer flaky.Close()

	every, err := cl.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{
		Name:     "every-second",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "* * * * * *"}, Timezone: "UTC"},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: s.url()}}},
	}, IdempotencyKey: "every-second"})
	if err != nil {
		t.Fatal(err)
	}
	once, err := cl.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{
		Name:     "flaky-one-off",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(time.Now().Add(5 * time.Second).Truncate(time.Second))}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: flaky.URL}}},
		Retry: &sundialv1.RetryPolicy{MaxAttempts: 3, Backoff: sundialv1.Backoff_BACKOFF_FIXED,
			InitialDelay: durationpb.New(time.Second), MaxDelay: durationpb.New(time.Second)},
	}, IdempotencyKey: "flaky-one-off"})
	if err != nil {
		t.Fatal(err)
	}
	everyID, onceID := every.GetJob().GetId(), once.GetJob().GetId()

	delivered := func() []delivery {
		got, _ := s.snapshot()
		var out []delivery
		for _, ds := range got {
			if ds[0].jobID == everyID {
				out = append(out, ds[0])
			}
		}
		return out
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(100 * time.Millisecond) // polling other processes' effects
		}
	}
	waitFor("three firings of the per-second job", func() bool { return len(delivered()) >= 3 })
	paused := time.Now()
	if _, err := cl.PauseJob(ctx, &sundialv1.PauseJobRequest{Id: everyID}); err != nil {
		t.Fatalf("pause: %v", err)
	}

	// The one-off: attempt 1 fails, attempt 2 (from the outbox) succeeds,
	// and the job completes.
	waitFor("the one-off job completed", func() bool {
		resp, err := cl.GetJob(ctx, &sundialv1.GetJobRequest{Id: onceID})
		return err == nil && resp.GetJob().GetStatus() == sundialv1.JobStatus_JOB_STATUS_COMPLETED
	})
	mu.Lock()
	if len(attempts) != 1 {
		t.Errorf("the one-off's target saw %d executions", len(attempts))
	}
	for exec, as := range attempts {
		if strings.Join(as, ",") != "1,2" {
			t.Errorf("execution %s: attempts %v, want 1,2", exec, as)
		}
	}
	mu.Unlock()
	// The history shows the attempt once the worker's recorder has written
	// its group (--ledger-linger, 250 ms, after the attempt settled).
	statuses := map[int32]sundialv1.ExecutionStatus{}
	waitFor("both attempts of the one-off in its history", func() bool {
		resp, err := cl.ListExecutions(ctx, &sundialv1.ListExecutionsRequest{JobId: onceID, PageSize: 100})
		if err != nil {
			return false
		}
		clear(statuses)
		for _, a := range resp.GetAttempts() {
			statuses[a.GetAttempt()] = a.GetStatus()
		}
		return len(statuses) == 2 && statuses[2] != sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
	})
	if statuses[1] != sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED || statuses[2] != sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
		t.Errorf("one-off ledger: %v", statuses)
	}

	// The paused job: nothing due more than a second after the pause
	// reaches the target, and the worker recorded the held firings it
	// dropped — as one summary row for those it held, one row each for
	// those found stale at their instant.
	stale := 0
	waitFor("stale firings of the paused job in the ledger", func() bool {
		stale = 0
		resp, err := cl.ListExecutions(ctx, &sundialv1.ListExecutionsRequest{JobId: everyID, PageSize: 1000})
		if err != nil {
			return false
		}
		for _, a := range resp.GetAttempts() {
			if a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED {
				continue
			}
			if strings.Contains(a.GetReason(), "stale job version") {
				stale++
			}
			stale += droppedCount(a.GetReason())
		}
		return stale >= 3
	})
	for _, d := range delivered() {
		if d.scheduled.After(paused.Add(time.Second)) {
			t.Errorf("slot %s of the paused job fired (paused at %s)", d.scheduled.Format(time.StampMilli), paused.Format(time.StampMilli))
		}
	}
	t.Logf("paused at %s; %d firings already in Kafka were skipped as stale", paused.Format(time.StampMilli), stale)
}
