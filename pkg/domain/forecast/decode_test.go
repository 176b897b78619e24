package forecast

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The Decoder, reading only the schedule and jitter out of a stored spec,
// gives the same view as FromJob on the decoded job: same display, jitter
// and priority, the same grouping of jobs, the same firings.
func TestDecoderAgreesWithFromJob(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	target := &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://example/hook", Headers: map[string]string{"A": "b"}}}}
	cron := func(expr, zone string) *sundialv1.Schedule {
		return &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: expr}, Timezone: zone}
	}
	every := &sundialv1.Schedule{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(90 * time.Second)}}
	started := &sundialv1.Schedule{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(90 * time.Second)}, StartTime: timestamppb.New(created)}
	rrule := &sundialv1.Schedule{Spec: &sundialv1.Schedule_Rrule{Rrule: "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0"}, Timezone: "Europe/Paris"}
	union := cron("0 9 * * *", "UTC")
	union.AdditionalSchedules = []*sundialv1.Schedule{{Spec: &sundialv1.Schedule_Cron{Cron: "0 17 * * *"}}}
	cases := []struct {
		s       *sundialv1.Schedule
		jitter  *durationpb.Duration
		created time.Time
		prio    sundialv1.Priority
	}{
		{cron("0 0 * * *", ""), nil, created, 0},
		{cron("0 0 * * *", ""), durationpb.New(1500 * time.Millisecond), created.Add(time.Hour), sundialv1.Priority_PRIORITY_HIGH},
		{cron("0 0 * * *", "America/New_York"), durationpb.New(time.Minute), created, 0},
		{cron("@daily", ""), durationpb.New(-time.Second), created, 0},
		{every, nil, created, 0},
		{every, nil, created.Add(time.Second), 0},
		{started, nil, created, 0},
		{started, nil, created.Add(time.Second), 0},
		{rrule, nil, created, 0},
		{rrule, nil, created.Add(24 * time.Hour), 0},
		{union, durationpb.New(20 * time.Second), created, sundialv1.Priority_PRIORITY_LOW},
		// H hashes each job's id: the same spec, a schedule per job
		// unless H lands on the same values (TestForecastHashedFleet).
		{cron("H H * * *", "Europe/Berlin"), nil, created, 0},
		{cron("H H * * *", "Europe/Berlin"), nil, created, 0},
	}
	d := NewDecoder(nil)
	var viaFrom, viaDec []Job
	for i, c := range cases {
		job := &sundialv1.Job{Id: fmt.Sprint("id-", i), Tenant: "acme", Name: fmt.Sprint("n", i), Schedule: c.s, Target: target,
			MaxJitter: c.jitter, Priority: c.prio, Payload: []byte("payload"), Labels: map[string]string{"x": "y"}}
		raw, err := proto.Marshal(job)
		if err != nil {
			t.Fatal(err)
		}
		a := FromJob(job, c.created, nil)
		b, err := d.Job(raw, job.Id, job.Tenant, job.Name, job.Priority, c.created)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if a.Expr != b.Expr || a.Cron != b.Cron || a.Zone != b.Zone || a.Priority != b.Priority || max(a.Jitter, 0) != b.Jitter {
			t.Fatalf("case %d: FromJob %+v, Decoder %+v", i, a, b)
		}
		sa, err1 := a.Build()
		sb, err2 := b.Build()
		if err1 != nil || err2 != nil {
			t.Fatalf("case %d: build %v %v", i, err1, err2)
		}
		for x, y, k := created, created, 0; k < 5; k++ {
			x, y = sa.Next(x), sb.Next(y)
			if !x.Equal(y) {
				t.Fatalf("case %d: firing %d: %v vs %v", i, k, x, y)
			}
		}
		viaFrom, viaDec = append(viaFrom, a), append(viaDec, b)
	}
	for i := range cases {
		for j := range cases {
			if (viaFrom[i].Key == viaFrom[j].Key) != (viaDec[i].Key == viaDec[j].Key) {
				t.Errorf("cases %d and %d: FromJob groups them %v, the Decoder %v", i, j, viaFrom[i].Key == viaFrom[j].Key, viaDec[i].Key == viaDec[j].Key)
			}
		}
	}
	if len(d.schedules) != 8 {
		t.Errorf("the decoder decoded %d schedules, want the 8 distinct encodings", len(d.schedules))
	}
	if n := len(viaDec); viaDec[n-1].Key == viaDec[n-2].Key {
		t.Error("two jobs with H share a forecast key")
	}
	if _, err := d.Job([]byte{0x2a, 0xff}, "x", "t", "n", 0, created); err == nil {
		t.Error("a truncated spec was accepted")
	}
}

// BenchmarkDecoderJob is the per-job cost the api pays for a stored spec
// whose schedule the Decoder has seen: the scan, the key, no decoding.
func BenchmarkDecoderJob(b *testing.B) {
	job := &sundialv1.Job{Id: "0193a1b2-0000-7000-8000-000000000001", Tenant: "t", Name: "nightly",
		Schedule:  &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 * * *"}, Timezone: "Europe/Berlin"},
		Target:    &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://hooks.example/job", Headers: map[string]string{"Authorization": "{{secret:k}}"}}}},
		MaxJitter: durationpb.New(10 * time.Second), Payload: make([]byte, 200)}
	raw, err := proto.Marshal(job)
	if err != nil {
		b.Fatal(err)
	}
	d := NewDecoder(nil)
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		if _, err := d.Job(raw, job.Id, job.Tenant, job.Name, job.Priority, created); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzDecoderJob: any bytes either fail to decode or give the view that
// decoding the job whole and calling FromJob gives (same schedule display,
// zone and jitter), and never panic. It found that a schedule field met
// twice must be merged, not replaced (testdata/fuzz).
func FuzzDecoderJob(f *testing.F) {
	for _, j := range []*sundialv1.Job{
		{Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 * * *"}}, MaxJitter: durationpb.New(time.Second)},
		{Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(time.Minute)}, Timezone: "Asia/Tokyo"}, Name: "x"},
	} {
		raw, err := proto.Marshal(j)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte{0x2a, 0x03, 0x0a, 0x01, 0x2a})
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := NewDecoder(nil).Job(raw, "id", "t", "n", 0, created)
		whole := &sundialv1.Job{}
		werr := proto.Unmarshal(raw, whole)
		if err != nil {
			return // the decoder may refuse more (a bad jitter) but must not accept less
		}
		if werr != nil {
			// Bytes the full decoder refuses in a field the forecast
			// skips are not the forecast's concern.
			return
		}
		whole.Id, whole.Tenant, whole.Name = "id", "t", "n"
		want := FromJob(whole, created, nil)
		if got.Expr != want.Expr || got.Zone != want.Zone || got.Cron != want.Cron {
			t.Fatalf("decoder %q %q %q, FromJob %q %q %q", got.Expr, got.Zone, got.Cron, want.Expr, want.Zone, want.Cron)
		}
		if got.Jitter != max(want.Jitter, 0) {
			t.Fatalf("decoder jitter %s, FromJob %s", got.Jitter, want.Jitter)
		}
	})
}

// BenchmarkDecoderJobHashed is the per-job cost of a job with H: the scan,
// H resolved from the job's id (one parse of its cron) and the key.
func BenchmarkDecoderJobHashed(b *testing.B) {
	job := &sundialv1.Job{Id: "0193a1b2-0000-7000-8000-000000000001", Tenant: "t", Name: "nightly",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "H H * * *"}, Timezone: "Europe/Berlin"},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://hooks.example/job"}}}}
	raw, err := proto.Marshal(job)
	if err != nil {
		b.Fatal(err)
	}
	d := NewDecoder(nil)
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		if _, err := d.Job(raw, job.Id, job.Tenant, job.Name, job.Priority, created); err != nil {
			b.Fatal(err)
		}
	}
}
