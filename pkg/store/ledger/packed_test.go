package ledger

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// A packed record carries only what is not in the row's key or status
// column, clipped as the columns clip it.
func TestPackRecordLeavesTheKeyToTheRow(t *testing.T) {
	at := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	b, err := packRecord(&sundialv1.ExecutionAttempt{
		ExecutionId: "e1", JobId: "j1", Attempt: 2, FenceToken: 9, ScheduledTime: timestamppb.New(at),
		Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED, Tenant: "acme", HttpStatus: 503,
		Error: strings.Repeat("x", MaxTextBytes+10), FireTime: timestamppb.New(at),
	})
	if err != nil {
		t.Fatal(err)
	}
	var got sundialv1.ExecutionAttempt
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.GetExecutionId() != "" || got.GetJobId() != "" || got.GetAttempt() != 0 || got.GetFenceToken() != 0 ||
		got.GetScheduledTime() != nil || got.GetStatus() != 0 {
		t.Errorf("key or status packed: %v", &got)
	}
	if got.GetTenant() != "acme" || got.GetHttpStatus() != 503 || len(got.GetError()) != MaxTextBytes || !got.GetFireTime().AsTime().Equal(at) {
		t.Errorf("fields lost: %v", &got)
	}
}

// Merging keeps the column layout's rule: a later record replaces the
// fields it sets and keeps those it does not, whatever order the map
// returns its entries in; rows written as columns are the base.
func TestMergePartsLaysLaterRecordsOverEarlierOnes(t *testing.T) {
	at := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	pack := func(a *sundialv1.ExecutionAttempt) []byte {
		b, err := packRecord(a)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	running := pack(&sundialv1.ExecutionAttempt{Tenant: "acme", StartedTime: timestamppb.New(at.Add(time.Millisecond)),
		Lateness: durationpb.New(time.Millisecond), Worker: "w1", FireTime: timestamppb.New(at)})
	// The outcome repeats the start with nanoseconds of zero: a Merge of
	// the message would keep the earlier nanoseconds; a field is replaced
	// whole.
	failed := pack(&sundialv1.ExecutionAttempt{Tenant: "acme", StartedTime: timestamppb.New(at.Add(2 * time.Second)),
		FinishedTime: timestamppb.New(at.Add(3 * time.Second)), HttpStatus: 500, Error: "boom"})
	dead := pack(&sundialv1.ExecutionAttempt{Tenant: "acme", Reason: "retries exhausted"})

	for range 20 { // map order varies from run to run
		// The column base: a RUNNING record written before packing.
		base := &sundialv1.ExecutionAttempt{ExecutionId: "e1", JobId: "j1", Attempt: 1, Worker: "old-worker",
			Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD, JobVersion: 4}
		if err := mergeParts(base, map[int][]byte{
			int(statusRank(sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD)):    dead,
			int(statusRank(sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING)): running,
			int(statusRank(sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED)):  failed,
		}); err != nil {
			t.Fatal(err)
		}
		want := &sundialv1.ExecutionAttempt{ExecutionId: "e1", JobId: "j1", Attempt: 1, Worker: "w1", Tenant: "acme",
			Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD, JobVersion: 4,
			FireTime: timestamppb.New(at), StartedTime: timestamppb.New(at.Add(2 * time.Second)),
			FinishedTime: timestamppb.New(at.Add(3 * time.Second)), Lateness: durationpb.New(time.Millisecond),
			HttpStatus: 500, Error: "boom", Reason: "retries exhausted"}
		if !proto.Equal(base, want) {
			t.Fatalf("merged\n%v\nwant\n%v", base, want)
		}
	}
}

// A corrupt cell is an error naming the execution, not a silently
// partial record.
func TestMergePartsReportsACorruptCell(t *testing.T) {
	a := &sundialv1.ExecutionAttempt{ExecutionId: "e1", Attempt: 1}
	err := mergeParts(a, map[int][]byte{5: {0xff, 0xff, 0xff}})
	if err == nil || !strings.Contains(err.Error(), "execution e1") || !strings.Contains(err.Error(), "rank 5") {
		t.Fatalf("err = %v", err)
	}
}
