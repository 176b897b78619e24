package peers

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/testkit/harness"
)

func TestOffsetsOfTheJitteredShapeSpreadOverTheSecond(t *testing.T) {
	const jobs = 5000
	perTenth := make([]int, 10)
	for j := range jobs {
		o := Offset(Jittered, j)
		if o < 0 || o >= time.Second || o%time.Millisecond != 0 {
			t.Fatalf("job %d: offset %s outside [0, 1s) or not whole milliseconds", j, o)
		}
		if o != Offset(Jittered, j) {
			t.Fatalf("job %d: offset not fixed", j)
		}
		perTenth[o/(100*time.Millisecond)]++
	}
	// Uniform: 500 a tenth of a second; a hash gives a few dozen either way.
	for i, n := range perTenth {
		if n < 400 || n > 600 {
			t.Errorf("tenth %d of the second holds %d of %d firings: %v", i, n, jobs, perTenth)
		}
	}
	if Offset(Herd, 17) != 0 {
		t.Error("the herd fires at the whole second")
	}
}

func TestExpectedIsOneFiringAJobASecondAtItsOffset(t *testing.T) {
	start := time.Date(2026, 11, 25, 10, 0, 0, 300_000_000, time.UTC) // truncated to 10:00:00
	end := start.Add(2 * time.Second)                                 // 10:00:02
	for _, shape := range []Shape{Herd, Jittered} {
		want := Expected(shape, 7, start, end)
		if len(want) != 21 {
			t.Fatalf("%s: %d firings, want 7 jobs × 3 seconds", shape, len(want))
		}
		for s := range 3 {
			sec := start.Truncate(time.Second).Add(time.Duration(s) * time.Second)
			for j := range 7 {
				if !want[firingKey{j, sec.Add(Offset(shape, j)).UnixNano()}] {
					t.Errorf("%s: job %d misses its firing of %s", shape, j, sec.Format(time.TimeOnly))
				}
			}
		}
	}
}

func TestNextDueAndGroups(t *testing.T) {
	base := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		now    time.Time
		offset time.Duration
		want   time.Time
	}{
		{base, 0, base.Add(time.Second)}, // due now: the next one
		{base.Add(time.Millisecond), 0, base.Add(time.Second)},
		{base.Add(100 * time.Millisecond), 250 * time.Millisecond, base.Add(250 * time.Millisecond)},
		{base.Add(250 * time.Millisecond), 250 * time.Millisecond, base.Add(1250 * time.Millisecond)},
		{base.Add(900 * time.Millisecond), 250 * time.Millisecond, base.Add(1250 * time.Millisecond)},
	} {
		if got := nextDue(c.now, c.offset); !got.Equal(c.want) {
			t.Errorf("nextDue(%s, %s) = %s, want %s", c.now.Format(time.StampMilli), c.offset, got.Format(time.StampMilli), c.want.Format(time.StampMilli))
		}
	}
	if everySecond := (everySecond{offset: 40 * time.Millisecond}); !everySecond.Next(base).Equal(base.Add(40 * time.Millisecond)) {
		t.Error("River's schedule does not follow nextDue")
	}
	gs := groups(Jittered, 3000)
	n := 0
	for i, g := range gs {
		if i > 0 && g.offset <= gs[i-1].offset {
			t.Fatalf("groups out of order at %d", i)
		}
		for _, j := range g.jobs {
			if Offset(Jittered, j) != g.offset {
				t.Fatalf("job %d in the group of %s", j, g.offset)
			}
		}
		n += len(g.jobs)
	}
	if n != 3000 {
		t.Fatalf("groups hold %d jobs, want 3000", n)
	}
	if h := groups(Herd, 50); len(h) != 1 || len(h[0].jobs) != 50 {
		t.Fatalf("the herd is one group of every job, got %d groups", len(h))
	}
}

func TestAnalyzeCountsLostDuplicatesEarlyAndLateness(t *testing.T) {
	start := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	end := start.Add(time.Second) // seconds :00 and :01
	want := Expected(Herd, 3, start, end)
	at := func(s int, ms int) time.Time {
		return start.Add(time.Duration(s)*time.Second + time.Duration(ms)*time.Millisecond)
	}
	arrivals := []Arrival{
		{Job: 0, Due: at(0, 0), At: at(0, 5)},
		{Job: 1, Due: at(0, 0), At: at(0, 7)},
		{Job: 1, Due: at(0, 0), At: at(0, 9)}, // second delivery
		{Job: 2, Due: at(0, 0), At: at(0, 30)},
		{Job: 0, Due: at(1, 0), At: at(0, 990)}, // early
		{Job: 1, Due: at(1, 0), At: at(1, 2)},
		// job 2's firing of :01 never arrives
		{Job: 0, Due: at(-1, 0), At: at(-1, 3)},   // warm-up: left out
		{Job: 0, Due: at(2, 0), At: at(2, 1)},     // wind-down: left out
		{Job: 9, Due: at(1, 0), At: at(1, 4)},     // no such job
		{Job: 0, Due: at(1, 500), At: at(1, 501)}, // not a due instant
		{Job: 0, Key: "task-x", At: at(1, 3)},     // due never resolved
		{Err: http.ErrNoLocation, Due: at(1, 0), At: at(1, 3)},
	}
	a := Analyze(want, arrivals, start, end)
	if a.Expected != 6 || a.Lost != 1 || a.Duplicates != 1 || a.Early != 1 || a.Unexpected != 4 {
		t.Fatalf("got expected %d lost %d dups %d early %d unexpected %d, want 6 1 1 1 4", a.Expected, a.Lost, a.Duplicates, a.Early, a.Unexpected)
	}
	wantLat := []time.Duration{-10 * time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 7 * time.Millisecond, 30 * time.Millisecond}
	if len(a.Lateness) != len(wantLat) {
		t.Fatalf("lateness %v, want %v", a.Lateness, wantLat)
	}
	for i := range wantLat {
		if a.Lateness[i] != wantLat[i] {
			t.Fatalf("lateness %v, want %v (first arrivals only, sorted)", a.Lateness, wantLat)
		}
	}
}

func TestHeld(t *testing.T) {
	ok := harness.Summary{N: 100, P99: 900 * time.Millisecond, Max: 4 * time.Second}
	for _, c := range []struct {
		lost int
		s    harness.Summary
		want bool
	}{
		{0, ok, true},
		{1, ok, false},
		{0, harness.Summary{N: 100, P99: 1100 * time.Millisecond, Max: 2 * time.Second}, false},
		{0, harness.Summary{N: 100, P99: 10 * time.Millisecond, Max: 6 * time.Second}, false},
		{0, harness.Summary{}, false}, // nothing arrived at all
	} {
		if got := Held(c.lost, c.s, 5*time.Second, time.Second); got != c.want {
			t.Errorf("Held(%d, %+v) = %v, want %v", c.lost, c.s, got, c.want)
		}
	}
}

func TestSinkRecordsWhatThePosterSends(t *testing.T) {
	s, err := NewSink(clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	p := newPoster(s.URL(), 2)
	defer p.close()
	due := time.Date(2026, 11, 25, 10, 0, 0, 123_456_789, time.UTC)
	if err := p.post(context.Background(), 42, due, "river-7"); err != nil {
		t.Fatal(err)
	}
	if err := p.post(context.Background(), 43, time.Time{}, "task-id"); err != nil {
		t.Fatal(err)
	}
	got := s.Arrivals()
	if len(got) != 2 {
		t.Fatalf("%d arrivals, want 2", len(got))
	}
	if a := got[0]; a.Err != nil || a.Job != 42 || !a.Due.Equal(due) || a.Key != "river-7" || a.At.IsZero() {
		t.Errorf("first arrival %+v", a)
	}
	if a := got[1]; a.Err != nil || a.Job != 43 || !a.Due.IsZero() || a.Key != "task-id" {
		t.Errorf("second arrival %+v (no due: resolved later)", a)
	}
}

func TestParseArrivalRejectsBadHeaders(t *testing.T) {
	h := http.Header{}
	h.Set(HeaderJob, "x")
	h.Set(HeaderDue, "yesterday")
	if a := ParseArrival(time.Now(), h.Get); a.Err == nil {
		t.Fatal("bad job and due parsed")
	}
}

func TestAsynqResolveFillsDueByTaskID(t *testing.T) {
	due := time.Date(2026, 11, 25, 10, 0, 1, 0, time.UTC)
	p := &asynqPeer{due: map[string]time.Time{"t1": due}}
	out := p.resolve([]Arrival{{Job: 1, Key: "t1"}, {Job: 2, Key: "unknown"}, {Job: 3, Key: "t1", Due: due.Add(time.Second)}})
	if !out[0].Due.Equal(due) || !out[1].Due.IsZero() || !out[2].Due.Equal(due.Add(time.Second)) {
		t.Fatalf("resolved %+v", out)
	}
}

func TestWithDatabase(t *testing.T) {
	got, err := withDatabase("postgres://sundial:sundial@127.0.0.1:5432/sundial?sslmode=disable", "bench_river_1")
	if err != nil || got != "postgres://sundial:sundial@127.0.0.1:5432/bench_river_1?sslmode=disable" {
		t.Fatalf("withDatabase = %q, %v", got, err)
	}
	if _, err := withDatabase("host=127.0.0.1 dbname=sundial", "x"); err == nil {
		t.Fatal("a keyword DSN was accepted")
	}
}
