package retry

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/target"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

const (
	succeeded = sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED
	retry     = sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED
	dead      = sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD
)

func env(attempt, first, maxAttempts int32, b sundialv1.Backoff) *sundialv1.Firing {
	return &sundialv1.Firing{
		ExecutionId: "exec-1", Attempt: attempt, FirstAttempt: first,
		Retry: &sundialv1.RetryPolicy{MaxAttempts: maxAttempts, Backoff: b,
			InitialDelay: durationpb.New(time.Second), MaxDelay: durationpb.New(10 * time.Second)},
	}
}

func status(code int) target.Result {
	c, p := target.ClassifyStatus(code)
	return target.Result{HTTPStatus: code, Class: c, Permanent: p, Err: errors.New("status")}
}

func TestDecide(t *testing.T) {
	exp := sundialv1.Backoff_BACKOFF_EXPONENTIAL
	for _, tc := range []struct {
		name   string
		f      *sundialv1.Firing
		res    target.Result
		status sundialv1.ExecutionStatus
		class  string
		delay  time.Duration
		made   int32
	}{
		{"success", env(1, 1, 3, exp), target.Result{OK: true}, succeeded, "", 0, 1},
		{"5xx first attempt", env(1, 1, 3, exp), status(503), retry, "http_5xx", time.Second, 1},
		{"5xx second attempt", env(2, 1, 3, exp), status(500), retry, "http_5xx", 2 * time.Second, 2},
		{"5xx last attempt", env(3, 1, 3, exp), status(500), dead, "http_5xx", 0, 3},
		{"429", env(1, 1, 3, exp), status(429), retry, "http_429", time.Second, 1},
		{"408", env(1, 1, 3, exp), status(408), retry, "http_4xx", time.Second, 1},
		{"404 is permanent", env(1, 1, 3, exp), status(404), dead, "http_4xx", 0, 1},
		{"401 is permanent", env(2, 1, 5, exp), status(401), dead, "http_4xx", 0, 2},
		{"timeout", env(1, 1, 2, exp), target.Failed(target.ClassTimeout, false, errors.New("t")), retry, "timeout", time.Second, 1},
		{"connection", env(1, 1, 2, exp), target.Failed(target.ClassConnection, false, errors.New("c")), retry, "connection", time.Second, 1},
		{"circuit open", env(1, 1, 2, exp), target.Failed(target.ClassCircuitOpen, false, errors.New("o")), retry, "circuit_open", time.Second, 1},
		{"refused address", env(1, 1, 5, exp), target.Failed(target.ClassAddressRefused, true, errors.New("r")), dead, "address_refused", 0, 1},
		{"missing secret", env(1, 1, 5, exp), target.Failed(target.ClassSecret, true, errors.New("s")), dead, "secret", 0, 1},
		{"default policy: one attempt", &sundialv1.Firing{Attempt: 1}, status(500), dead, "http_5xx", 0, 1},
		{"unclassified error", env(1, 1, 2, exp), target.Result{Err: errors.New("?")}, retry, "connection", time.Second, 1},
		// A re-drive that started at attempt 4 has a fresh budget of 3.
		{"re-driven round, first of 3", env(4, 4, 3, exp), status(500), retry, "http_5xx", time.Second, 1},
		{"re-driven round, last of 3", env(6, 4, 3, exp), status(500), dead, "http_5xx", 0, 3},
		// Envelopes from before first_attempt existed count from 1.
		{"no first_attempt", env(2, 0, 3, exp), status(500), retry, "http_5xx", 2 * time.Second, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.f, tc.res, now)
			if d.Status != tc.status || d.Class != tc.class || d.Delay != tc.delay || d.Attempts != tc.made {
				t.Fatalf("%+v, want %v %s delay %s attempts %d", d, tc.status, tc.class, tc.delay, tc.made)
			}
			if d.Status == retry && !d.NextFire.Equal(now.Add(tc.delay)) {
				t.Fatalf("next fire %s", d.NextFire)
			}
			if d.Status != succeeded && d.Reason == "" {
				t.Fatal("no reason")
			}
		})
	}
}

func TestRetryAfterReplacesBackoffCappedByMaxDelay(t *testing.T) {
	res := status(429)
	res.RetryAfter, res.HasRetryAfter = 4*time.Second, true
	if d := Decide(env(1, 1, 3, sundialv1.Backoff_BACKOFF_FIXED), res, now); d.Delay != 4*time.Second {
		t.Fatalf("Retry-After 4s: delay %s", d.Delay)
	}
	res.RetryAfter = time.Hour
	if d := Decide(env(1, 1, 3, sundialv1.Backoff_BACKOFF_FIXED), res, now); d.Delay != 10*time.Second {
		t.Fatalf("Retry-After 1h with max delay 10s: delay %s", d.Delay)
	}
	res.RetryAfter = 0
	if d := Decide(env(1, 1, 3, sundialv1.Backoff_BACKOFF_EXPONENTIAL), res, now); d.Delay != 0 {
		t.Fatalf("Retry-After 0: delay %s", d.Delay)
	}
}

func TestBackoff(t *testing.T) {
	s := time.Second
	fixed, exp, jit := sundialv1.Backoff_BACKOFF_FIXED, sundialv1.Backoff_BACKOFF_EXPONENTIAL, sundialv1.Backoff_BACKOFF_EXPONENTIAL_WITH_JITTER
	for k, want := range []time.Duration{s, 2 * s, 4 * s, 8 * s, 10 * s, 10 * s} {
		if d := Backoff(exp, s, 10*s, k, "e", int32(k+1)); d != want {
			t.Errorf("exponential k=%d: %s, want %s", k, d, want)
		}
		if d := Backoff(fixed, s, 10*s, k, "e", int32(k+1)); d != s {
			t.Errorf("fixed k=%d: %s", k, d)
		}
	}
	// Jitter: within [d/2, d], deterministic, and spread across executions.
	seen := map[time.Duration]bool{}
	for i := range 200 {
		id := "exec-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		d := Backoff(jit, s, 10*s, 2, id, 3)
		if d < 2*s || d > 4*s {
			t.Fatalf("jittered %s outside [2s, 4s]", d)
		}
		if d != Backoff(jit, s, 10*s, 2, id, 3) {
			t.Fatal("jitter not deterministic")
		}
		seen[d] = true
	}
	if len(seen) < 150 {
		t.Fatalf("only %d distinct jittered delays of 200", len(seen))
	}
	// Huge k does not overflow.
	if d := Backoff(exp, s, time.Hour, 1000, "e", 1); d != time.Hour {
		t.Fatalf("k=1000: %s", d)
	}
}
