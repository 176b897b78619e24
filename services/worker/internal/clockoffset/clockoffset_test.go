package clockoffset

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fakeServer is a reference clock trueOffset ahead of the local fake clock,
// with scripted request and reply delays per sample (moving the fake clock).
type fakeServer struct {
	local      *clock.Fake
	trueOffset time.Duration
	delays     [][2]time.Duration // {there, back}
	fail       []bool
	i          int
}

func (s *fakeServer) ServerTime(context.Context) (time.Time, error) {
	i := s.i
	s.i++
	if i < len(s.fail) && s.fail[i] {
		return time.Time{}, errors.New("connection refused")
	}
	d := s.delays[i%len(s.delays)]
	s.local.Advance(d[0])
	server := s.local.Now().Add(s.trueOffset)
	s.local.Advance(d[1])
	return server, nil
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestRoundPicksSmallestRTT(t *testing.T) {
	local := clock.NewFake(t0)
	srv := &fakeServer{local: local, trueOffset: -200 * time.Millisecond, delays: [][2]time.Duration{
		{40 * time.Millisecond, 2 * time.Millisecond},    // asymmetric, large RTT: error 19 ms
		{500 * time.Microsecond, 700 * time.Microsecond}, // smallest RTT: error 0.1 ms
		{5 * time.Millisecond, 5 * time.Millisecond},
	}}
	e := New(local, srv, Config{Samples: 3}, quiet(), nil)
	est, err := e.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if est.RTT != 1200*time.Microsecond {
		t.Fatalf("RTT %s, want the smallest, 1.2ms", est.RTT)
	}
	if d := est.Offset - srv.trueOffset; d > est.RTT/2 || d < -est.RTT/2 {
		t.Fatalf("offset %s is %s from the truth, beyond RTT/2", est.Offset, d)
	}
	if e.Offset() != 0 {
		t.Fatal("Round must not apply the estimate")
	}
}

func TestUpdateAppliesAndCorrectsClock(t *testing.T) {
	local := clock.NewFake(t0)
	srv := &fakeServer{local: local, trueOffset: 200 * time.Millisecond, delays: [][2]time.Duration{{time.Millisecond, time.Millisecond}}}
	var seen []Estimate
	e := New(local, srv, Config{Samples: 4}, quiet(), func(est Estimate) { seen = append(seen, est) })
	if _, err := e.Update(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.Offset() != 200*time.Millisecond || len(seen) != 1 {
		t.Fatalf("offset %s (callbacks %d), want 200ms", e.Offset(), len(seen))
	}
	if got, want := e.Clock().Now(), local.Now().Add(200*time.Millisecond); !got.Equal(want) {
		t.Fatalf("corrected clock %s, want %s", got, want)
	}
}

func TestFailedSamplesAreSkipped(t *testing.T) {
	local := clock.NewFake(t0)
	srv := &fakeServer{local: local, trueOffset: time.Second, delays: [][2]time.Duration{{time.Millisecond, time.Millisecond}}, fail: []bool{true, false, true}}
	e := New(local, srv, Config{Samples: 3}, quiet(), nil)
	est, err := e.Round(context.Background())
	if err != nil || est.Offset != time.Second {
		t.Fatalf("round with one good sample: %+v, %v", est, err)
	}
	srv2 := &fakeServer{local: local, delays: [][2]time.Duration{{0, 0}}, fail: []bool{true, true}}
	e2 := New(local, srv2, Config{Samples: 2}, quiet(), nil)
	if _, err := e2.Update(context.Background()); err == nil {
		t.Fatal("round with no good sample succeeded")
	}
	if e2.Offset() != 0 {
		t.Fatal("a failed round changed the offset")
	}
}

// Start estimates once before returning; the periodic loop re-estimates on
// the fake clock's interval.
func TestStartAndPeriodicRounds(t *testing.T) {
	local := clock.NewFake(t0)
	srv := &fakeServer{local: local, trueOffset: 50 * time.Millisecond, delays: [][2]time.Duration{{0, 0}}}
	rounds := make(chan Estimate, 10)
	e := New(local, srv, Config{Samples: 1, Interval: time.Minute}, quiet(), func(est Estimate) { rounds <- est })
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	<-rounds
	if e.Offset() != 50*time.Millisecond {
		t.Fatalf("offset after Start %s", e.Offset())
	}
	local.Advance(time.Minute)
	<-rounds
}
