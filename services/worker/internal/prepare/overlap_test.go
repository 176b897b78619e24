package prepare

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Every overlap policy maps to the lease script's, and the execution
// carries the job's concurrency and its slot as its place in the queue.
func TestOverlapPoliciesReachTheLeaseScript(t *testing.T) {
	for p, want := range map[sundialv1.OverlapPolicy]lease.Overlap{
		sundialv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED:     lease.OverlapAllow,
		sundialv1.OverlapPolicy_OVERLAP_POLICY_ALLOW:           lease.OverlapAllow,
		sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP:            lease.OverlapSkip,
		sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE:      lease.OverlapBufferOne,
		sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ALL:      lease.OverlapBufferAll,
		sundialv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER:    lease.OverlapCancelOther,
		sundialv1.OverlapPolicy_OVERLAP_POLICY_TERMINATE_OTHER: lease.OverlapTerminateOther,
	} {
		if got := Overlap(p); got != want {
			t.Errorf("Overlap(%v) = %v, want %v", p, got, want)
		}
		if want != lease.OverlapAllow && want.String() != p.String()[len("OVERLAP_POLICY_"):] {
			t.Errorf("%v is counted as %q", p, want.String())
		}
	}
	slot := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	ex := Execution(&sundialv1.Firing{ExecutionId: "e", JobId: "j", Attempt: 1, MaxConcurrency: 3, ScheduledTime: timestamppb.New(slot),
		Overlap: sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ALL})
	if ex.MaxConcurrency != 3 || ex.Order != slot.UnixMilli() || ex.Overlap != lease.OverlapBufferAll {
		t.Fatalf("execution %+v", ex)
	}
}
