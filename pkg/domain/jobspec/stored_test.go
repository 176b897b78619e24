package jobspec

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The spec column leaves out what the row's own columns track, and
// encoding does not change the job it was given.
func TestStoredSpecLeavesOutTheColumnsFields(t *testing.T) {
	job := &sundialv1.Job{Id: "j1", Name: "nightly", NextFireTime: timestamppb.Now(), RemainingRuns: 7,
		Labels: map[string]string{"team": "billing"}}
	b, err := StoredSpec(job)
	if err != nil {
		t.Fatal(err)
	}
	var got sundialv1.Job
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.GetNextFireTime() != nil || got.GetRemainingRuns() != 0 {
		t.Fatalf("spec keeps next_fire_time %v and remaining_runs %d; want neither", got.GetNextFireTime(), got.GetRemainingRuns())
	}
	if got.GetName() != "nightly" || got.GetLabels()["team"] != "billing" {
		t.Fatalf("spec lost the job's own fields: %v", &got)
	}
	if job.GetNextFireTime() == nil || job.GetRemainingRuns() != 7 {
		t.Fatal("StoredSpec changed the job it encoded")
	}
}

func TestStoredLabelsAreNeverNil(t *testing.T) {
	if l := StoredLabels(&sundialv1.Job{}); l == nil || len(l) != 0 {
		t.Fatalf("labels of a job without any = %#v, want an empty map", l)
	}
	if l := StoredLabels(&sundialv1.Job{Labels: map[string]string{"a": "b"}}); l["a"] != "b" {
		t.Fatalf("labels = %v", l)
	}
}
