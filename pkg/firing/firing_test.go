package firing

import (
	"testing"
	"time"

	"github.com/google/uuid"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestExecutionIDIsDeterministicPerSlot(t *testing.T) {
	job := uuid.MustParse("01890a5d-ac96-774b-bcce-b302099a8057")
	slot := time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC)
	a, b := ExecutionID(job, slot), ExecutionID(job, slot.In(time.FixedZone("x", 3600)))
	if a != b {
		t.Fatalf("same slot in another zone gave %s and %s", a, b)
	}
	if ExecutionID(job, slot.Add(time.Nanosecond)) == a {
		t.Fatal("a different slot gave the same id")
	}
	other := uuid.MustParse("01890a5d-ac96-774b-bcce-b302099a8058")
	if ExecutionID(other, slot) == a {
		t.Fatal("a different job gave the same id")
	}
	if TriggerExecutionID(job, slot) == a {
		t.Fatal("a trigger at a slot's instant must be its own execution")
	}
	if got := a.String(); got != ExecutionID(job, slot).String() {
		t.Fatalf("not stable: %s", got)
	}
}

func TestPartitionInRangeAndSpread(t *testing.T) {
	seen := map[int]int{}
	for range 10000 {
		p := Partition(uuid.Must(uuid.NewV7()))
		if p < 0 || p >= Partitions {
			t.Fatalf("partition %d out of range", p)
		}
		seen[p]++
	}
	if len(seen) < Partitions*9/10 {
		t.Fatalf("10000 ids hit only %d of %d partitions", len(seen), Partitions)
	}
}

func TestTopics(t *testing.T) {
	tp := Topics{Prefix: "t1"}
	if got := tp.Fire(sundialv1.Priority_PRIORITY_UNSPECIFIED); got != "t1.fire.medium" {
		t.Fatalf("unspecified priority topic = %q", got)
	}
	want := []string{"t1.fire.critical", "t1.fire.high", "t1.fire.medium", "t1.fire.low"}
	for i, got := range tp.FireAll() {
		if got != want[i] {
			t.Fatalf("FireAll()[%d] = %q, want %q", i, got, want[i])
		}
	}
	if DefaultTopics.DLQ() != "sundial.dlq" {
		t.Fatalf("dlq = %q", DefaultTopics.DLQ())
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	f := &sundialv1.Firing{ExecutionId: "e", JobId: "j", Attempt: 2, Payload: []byte("p")}
	b, err := Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Decode(b)
	if err != nil || g.GetAttempt() != 2 || string(g.GetPayload()) != "p" {
		t.Fatalf("round trip = %v, %v", g, err)
	}
	if _, err := Decode([]byte{0xff, 0xff}); err == nil {
		t.Fatal("garbage decoded without error")
	}
}
