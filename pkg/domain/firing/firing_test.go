package firing

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

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

func TestJitterIsDeterministicAndBounded(t *testing.T) {
	job := uuid.MustParse("0192f0c4-6a3e-7c1a-9b1e-3f2a1c0d9e8f")
	slot := time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC)
	if j := Jitter(job, slot, 0); j != 0 {
		t.Fatalf("no max jitter gave %s", j)
	}
	if j := Jitter(job, slot, 500*time.Microsecond); j != 0 {
		t.Fatalf("a max jitter under a millisecond gave %s", j)
	}
	// Pinned values: the prefetcher stages fire instants with this formula
	// and the benchmark's sink measures lateness from them, so a change here
	// is a change of every staged firing's instant.
	for _, c := range []struct {
		slot time.Time
		max  time.Duration
		want time.Duration
	}{
		{slot, time.Minute, 58282 * time.Millisecond},
		{slot.Add(time.Second), time.Minute, 35057 * time.Millisecond},
		{slot, time.Second, 282 * time.Millisecond},
	} {
		if got := Jitter(job, c.slot, c.max); got != c.want {
			t.Errorf("Jitter(%s, %s) = %s, want %s", c.slot, c.max, got, c.want)
		}
	}
	seen := map[time.Duration]bool{}
	for i := range 1000 {
		j := Jitter(job, slot.Add(time.Duration(i)*time.Second), time.Second)
		if j < 0 || j >= time.Second || j%time.Millisecond != 0 {
			t.Fatalf("jitter %s out of [0, 1s) or not whole milliseconds", j)
		}
		seen[j/(100*time.Millisecond)] = true
	}
	if len(seen) != 10 {
		t.Fatalf("1000 slots fell in %d of 10 tenths of the second", len(seen))
	}
}

func TestTraceparentIsReadWithoutDecoding(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	f := &sundialv1.Firing{ExecutionId: "e", JobId: "j", Attempt: 2, Payload: make([]byte, 4096), Traceparent: tp,
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://x/"}}}}
	b, err := Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := Traceparent(b); got != tp {
		t.Fatalf("Traceparent = %q, want %q", got, tp)
	}
	f.Traceparent = ""
	b, _ = Encode(f)
	if got := Traceparent(b); got != "" {
		t.Fatalf("Traceparent of an envelope without one = %q", got)
	}
	if got := Traceparent([]byte{0xa2, 0x01, 0x7f}); got != "" {
		t.Fatalf("Traceparent of a truncated envelope = %q", got)
	}
}

// FuzzTraceparent: whatever the bytes, Traceparent agrees with a full
// decode whenever the bytes decode.
func FuzzTraceparent(f *testing.F) {
	for _, e := range []*sundialv1.Firing{
		{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{ExecutionId: "e", Payload: []byte("payload"), Traceparent: "x"},
		{},
	} {
		b, _ := Encode(e)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := Traceparent(b)
		e, err := Decode(b)
		if err != nil {
			return
		}
		if got != e.GetTraceparent() {
			t.Fatalf("Traceparent = %q, decode says %q", got, e.GetTraceparent())
		}
	})
}

func TestEnvelopeCarriesTheJobsMisfirePolicy(t *testing.T) {
	job := &sundialv1.Job{Id: "0192f0c4-6a3e-7c1a-9b1e-3f2a1c0d9e8f", Misfire: &sundialv1.MisfirePolicy{
		Action: sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, Grace: durationpb.New(time.Minute), MaxCatchUp: 2,
	}}
	f := New(job, Attempt{Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE, Number: 1})
	if !proto.Equal(job.GetMisfire(), f.GetMisfire()) {
		t.Fatalf("envelope misfire = %v, want the job's %v", f.GetMisfire(), job.GetMisfire())
	}
	if f.GetMisfire() == job.GetMisfire() {
		t.Fatal("the envelope aliases the job's policy instead of copying it")
	}
	if m := New(&sundialv1.Job{}, Attempt{}).GetMisfire(); m != nil {
		t.Fatalf("a job without a policy gave %v; want unset (the worker applies the defaults)", m)
	}
	if r := NextAttempt(f, time.Now(), time.Now()).GetMisfire(); !proto.Equal(f.GetMisfire(), r) {
		t.Fatalf("a retry carries %v, want %v", r, f.GetMisfire())
	}
}

// FirePriority reads back the priority of every fire topic under any
// prefix, and of nothing else.
func TestFirePriorityIsFiresInverse(t *testing.T) {
	for _, prefix := range []string{"sundial", "bench_x.y"} {
		tp := Topics{Prefix: prefix}
		for _, topic := range tp.FireAll() {
			p, ok := FirePriority(topic)
			if !ok || tp.Fire(p) != topic {
				t.Errorf("FirePriority(%q) = %v, %v", topic, p, ok)
			}
		}
		for _, other := range []string{tp.DLQ(), prefix + ".fire.urgent", prefix + ".fire.", "fire.high"} {
			if p, ok := FirePriority(other); ok {
				t.Errorf("FirePriority(%q) = %v, want none", other, p)
			}
		}
	}
}
