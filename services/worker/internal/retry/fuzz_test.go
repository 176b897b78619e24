package retry

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/target"
)

// FuzzDecide decides the follow-up of an attempt of any envelope a Kafka
// record may carry — the api validates jobs, but nothing validates a record
// on a fire topic again — with any outcome. It never panics; an attempt
// counts at least itself; a classified permanent failure dies; a retry waits between
// 0 and the policy's max delay (never a negative delay that would fire at
// once, whatever the attempt numbers and durations), and fires at now plus
// that wait.
func FuzzDecide(f *testing.F) {
	for _, e := range []*sundialv1.Firing{
		env(1, 1, 3, sundialv1.Backoff_BACKOFF_EXPONENTIAL),
		env(40, 1, 50, sundialv1.Backoff_BACKOFF_EXPONENTIAL_WITH_JITTER),
		{ExecutionId: "e", Attempt: 2147483647, FirstAttempt: -5, Retry: &sundialv1.RetryPolicy{MaxAttempts: 2147483647,
			InitialDelay: durationpb.New(time.Second), MaxDelay: &durationpb.Duration{Seconds: 315576000000}}},
		{ExecutionId: "e", Attempt: 3, Retry: &sundialv1.RetryPolicy{MaxAttempts: 9, Backoff: sundialv1.Backoff_BACKOFF_FIXED,
			InitialDelay: &durationpb.Duration{Seconds: -1}, MaxDelay: &durationpb.Duration{Seconds: 1, Nanos: -5}}},
		{},
	} {
		b, err := firing.Encode(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, 503, uint8(0), false, int64(0))
		f.Add(b, 429, uint8(1), false, int64(7))
	}
	classes := []string{"", target.ClassTimeout, target.ClassConnection, target.ClassAddressRefused, target.ClassCircuitOpen, target.ClassSecret}
	f.Fuzz(func(t *testing.T, b []byte, httpStatus int, class uint8, permanent bool, retryAfter int64) {
		e, err := firing.Decode(b)
		if err != nil {
			return
		}
		res := target.Result{HTTPStatus: httpStatus % 1000, Class: classes[int(class)%len(classes)], Permanent: permanent}
		if retryAfter != 0 {
			res.RetryAfter, res.HasRetryAfter = time.Duration(retryAfter), true
		}
		before := proto.Clone(e)
		d := Decide(e, res, now)
		if !proto.Equal(before, e) {
			t.Fatal("Decide modified the envelope")
		}
		if d.Attempts < 1 {
			t.Fatalf("attempts %d", d.Attempts)
		}
		_, _, _, maxDelay := Policy(e)
		switch d.Status {
		case sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED:
			// An unclassified result is judged by its status alone.
			if res.Permanent && res.Class != "" {
				t.Fatal("a permanent failure is retried")
			}
			if d.Delay < 0 || d.Delay > maxDelay {
				t.Fatalf("retry in %s, outside [0, %s]", d.Delay, maxDelay)
			}
			if !d.NextFire.Equal(now.Add(d.Delay)) {
				t.Fatalf("next fire %v, want now + %s", d.NextFire, d.Delay)
			}
		case sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD:
			if d.Reason == "" || d.Class == "" {
				t.Fatalf("dead without a reason or class: %+v", d)
			}
		case sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED:
			t.Fatal("a failure succeeded")
		default:
			t.Fatalf("status %v", d.Status)
		}
	})
}

// FuzzBackoff checks the backoff on its own for any policy and retry
// count: between 0 and the max delay, and never below the initial delay
// unless the max is below it or jitter halves it.
func FuzzBackoff(f *testing.F) {
	f.Add(uint8(1), int64(time.Second), int64(time.Minute), 3, "exec", int32(2))
	f.Add(uint8(2), int64(time.Second), int64(1<<63-1), 200, "exec", int32(2))
	f.Add(uint8(0), int64(-1), int64(5), 0, "", int32(0))
	f.Fuzz(func(t *testing.T, kind uint8, initial, maxDelay int64, k int, execID string, attempt int32) {
		if initial < 0 || maxDelay < initial || k < 0 || k > 1<<16 {
			return // Policy never passes these (it clamps max to initial)
		}
		b := sundialv1.Backoff(kind % 4)
		d := Backoff(b, time.Duration(initial), time.Duration(maxDelay), k, execID, attempt)
		if d < 0 || d > time.Duration(maxDelay) {
			t.Fatalf("Backoff(%v, %d, %d, %d) = %d, outside [0, max]", b, initial, maxDelay, k, d)
		}
		if b != sundialv1.Backoff_BACKOFF_EXPONENTIAL_WITH_JITTER && d < time.Duration(initial) {
			t.Fatalf("Backoff(%v, %d, %d, %d) = %d, below the initial delay", b, initial, maxDelay, k, d)
		}
	})
}
