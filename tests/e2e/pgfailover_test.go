//go:build e2e && pgfailover

package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// TestPostgresPrimaryKilledStandbyPromoted runs the four services on the
// cluster profile's Postgres pair (one multi-host DSN with
// target_session_attrs=read-write, as an operator would give them), kills
// the primary the way a crash does while per-second jobs fire, and
// promotes the standby at once, as a failover manager would: the slots
// staged before go on firing, jobs created after it are written by the
// api, staged by the prefetcher's epoch-fenced transactions and published
// by the relay's claims, each through its own pool reconnected to the new
// primary, and every slot reaches its target once (0 lost, 0 duplicate
// effects). The commits are synchronous to the
// standby, so nothing acknowledged is behind on it.
//
// Retries and dead letters cross the promotion too: one-off jobs due from
// 2 s before the kill to 7 s after it fail their first attempt and are
// retried 2 s later through the outbox (worker → Postgres → relay →
// Kafka → worker), and others fail every attempt and are dead-lettered
// in Postgres. Every retry is fired (each execution's target sees
// attempt 2, the job completes) and every dead execution has one dead
// letter: none lost in the rows the worker wrote while the primary
// changed.
func TestPostgresPrimaryKilledStandbyPromoted(t *testing.T) {
	infra := harness.InfraFromEnv()
	infra.PostgresDSN = testinfra.PostgresHADSN(t)
	// Whatever happens, the pair is made whole again for the next test
	// (the old primary comes back as the new one's standby).
	t.Cleanup(func() {
		if _, err := testinfra.RunClusterScript("postgres", "up"); err != nil {
			t.Errorf("healing the Postgres pair: %v", err)
		}
	})
	p := newPlatformOn(t, infra)
	p.start("prefetcher-1", "prefetcher", "--node-id", "pf-1")
	p.start("worker-1", "worker", "--worker-id", "w1")

	s := newSink(t, p)
	start := time.Now().Add(5 * time.Second).Truncate(time.Second)
	end := start.Add(30 * time.Second)
	want, _ := p.register(t, everySecond(40), s, "", start, end)
	t.Logf("%d slots expected between %s and %s", len(want), start.Format(time.TimeOnly), end.Format(time.TimeOnly))

	retrying := newFailingTarget(1) // attempt 1 fails, attempt 2 succeeds
	dying := newFailingTarget(2)    // both attempts fail
	t.Cleanup(retrying.Close)
	t.Cleanup(dying.Close)
	ctx := ctxT(t, 5*time.Minute)
	cl := p.client()
	oneOff := func(name, url string, at time.Time) string {
		resp, err := cl.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{
			Name:     name,
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(at)}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: url}}},
			Retry: &sundialv1.RetryPolicy{MaxAttempts: 2, Backoff: sundialv1.Backoff_BACKOFF_FIXED,
				InitialDelay: durationpb.New(2 * time.Second), MaxDelay: durationpb.New(2 * time.Second)},
		}, IdempotencyKey: name})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return resp.GetJob().GetId()
	}
	var retried, dead []string
	for i := range 10 {
		retried = append(retried, oneOff(fmt.Sprintf("retried-%d", i), retrying.URL, start.Add(time.Duration(6+i)*time.Second)))
	}
	for i := range 4 {
		dead = append(dead, oneOff(fmt.Sprintf("dead-%d", i), dying.URL, start.Add(time.Duration(6+2*i)*time.Second)))
	}

	time.Sleep(time.Until(start.Add(8 * time.Second))) // a point in the run, not synchronisation
	primary := testinfra.ClusterScript(t, "postgres", "primary")
	killed := time.Now()
	testinfra.ClusterScript(t, "postgres", "kill-primary")
	testinfra.ClusterScript(t, "postgres", "promote")
	promoted := time.Now()
	t.Logf("killed the primary (port %s) at %s; the standby promoted %s later", primary, killed.Format("15:04:05.000"), promoted.Sub(killed).Round(time.Millisecond))

	// Jobs created after the promotion: the api writes them to the new
	// primary, the prefetcher stages their slots and the relay publishes
	// them through their own reconnected pools.
	after := everySecond(20)
	for i := range after {
		after[i].name = "after-" + after[i].name
	}
	start2 := time.Now().Add(5 * time.Second).Truncate(time.Second)
	end2 := start2.Add(10 * time.Second)
	want2, _ := p.registerRetrying(t, after, s, "", start2, end2, 30*time.Second)
	t.Logf("%d more slots, of jobs created after the promotion, between %s and %s", len(want2), start2.Format(time.TimeOnly), end2.Format(time.TimeOnly))
	for id, sl := range want2 {
		want[id] = sl
	}

	awaitDeliveries(t, s, want, end2.Add(90*time.Second))
	// A worker whose settle write failed mid-failover may fire a retry's
	// attempt again under a new fence; the slot's execution is one, so
	// only fence uniqueness is checked, not slot order.
	dups := checkDeliveries(t, s, want, true, false)
	got, _ := s.snapshot()
	t.Logf("%d raw duplicate deliveries (deduplicated by the execution id); lateness of all slots: %s", dups, lateness(got, nil))
	around := func(d delivery) bool {
		return !d.scheduled.Before(killed.Add(-time.Second)) && d.scheduled.Before(promoted.Add(10*time.Second))
	}
	t.Logf("lateness of the slots due from a second before the kill to 10 s after the promotion: %s", lateness(got, around))

	// Each retried job's execution saw attempt 2 and the job completed;
	// each dead job's execution has one dead letter, after both attempts.
	waitUntil(t, 90*time.Second, "the retried one-offs completed", func() bool {
		for _, id := range retried {
			resp, err := cl.GetJob(ctx, &sundialv1.GetJobRequest{Id: id})
			if err != nil || resp.GetJob().GetStatus() != sundialv1.JobStatus_JOB_STATUS_COMPLETED {
				return false
			}
		}
		return true
	})
	byJob := retrying.attemptsByJob()
	for _, id := range retried {
		if as := byJob[id]; !slices.Contains(as, "1") || !slices.Contains(as, "2") {
			t.Errorf("retried job %s: its target saw attempts %v, want 1 and 2", id, as)
		}
	}
	conn, err := p.plat.Conn()
	if err != nil {
		t.Fatal(err)
	}
	dlq := sundialv1.NewDeadLetterServiceClient(conn)
	letters := map[string][]*sundialv1.DeadLetter{}
	waitUntil(t, 90*time.Second, "a dead letter for each dead one-off", func() bool {
		clear(letters)
		for _, id := range dead {
			resp, err := dlq.ListDeadLetters(ctx, &sundialv1.ListDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{JobId: id}})
			if err != nil {
				return false
			}
			letters[id] = resp.GetDeadLetters()
		}
		for _, id := range dead {
			if len(letters[id]) == 0 {
				return false
			}
		}
		return true
	})
	byJob = dying.attemptsByJob()
	for _, id := range dead {
		if n := len(letters[id]); n != 1 {
			t.Errorf("dead job %s: %d dead letters, want 1", id, n)
			continue
		}
		if dl := letters[id][0]; dl.GetAttempts() != 2 || dl.GetErrorClass() != "http_5xx" {
			t.Errorf("dead job %s: dead letter after %d attempts, class %q; want 2, http_5xx", id, dl.GetAttempts(), dl.GetErrorClass())
		}
		if as := byJob[id]; !slices.Contains(as, "1") || !slices.Contains(as, "2") {
			t.Errorf("dead job %s: its target saw attempts %v, want 1 and 2", id, as)
		}
	}
	t.Logf("retries: %d requests for %d one-offs; dead letters: %d requests for %d one-offs", retrying.requests(), len(retried), dying.requests(), len(dead))
}

// failingTarget answers 503 to the first failures attempts of each
// execution and 200 after, recording the Sundial-Attempt of every
// request by job.
type failingTarget struct {
	*httptest.Server
	mu       sync.Mutex
	attempts map[string][]string // job → attempts, in arrival order
	seen     map[string]int      // execution → requests
	total    int
}

func newFailingTarget(failures int) *failingTarget {
	ft := &failingTarget{attempts: map[string][]string{}, seen: map[string]int{}}
	ft.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ft.mu.Lock()
		job, exec := r.Header.Get(firing.HeaderJobID), r.Header.Get(firing.HeaderExecutionID)
		ft.attempts[job] = append(ft.attempts[job], r.Header.Get(firing.HeaderAttempt))
		ft.seen[exec]++
		n := ft.seen[exec]
		ft.total++
		ft.mu.Unlock()
		if n <= failures {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	return ft
}

func (ft *failingTarget) attemptsByJob() map[string][]string {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	out := make(map[string][]string, len(ft.attempts))
	for k, v := range ft.attempts {
		out[k] = slices.Clone(v)
	}
	return out
}

func (ft *failingTarget) requests() int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.total
}

// waitUntil polls cond every 100 ms (other processes' effects) until it
// holds, failing the test after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
