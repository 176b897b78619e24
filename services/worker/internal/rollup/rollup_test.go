package rollup

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/postgres/firingstats"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// memStore keeps what it is given, or refuses while fail is set.
type memStore struct {
	fail    bool
	rows    map[Key]Counts
	running map[string]int64
	lags    []map[string]int64 // every non-empty lag written
	writes  int
}

func (m *memStore) Write(_ context.Context, _ string, rows []Row, running map[string]int64, lag map[string]int64) error {
	if m.fail {
		return errors.New("postgres is down")
	}
	m.writes++
	if len(lag) > 0 {
		m.lags = append(m.lags, lag)
	}
	for _, r := range rows {
		c, ok := m.rows[r.Key]
		if !ok {
			c = Counts{Lateness: make([]int64, firingstats.Buckets)}
		}
		c.add(&r.Counts)
		m.rows[r.Key] = c
	}
	m.running = running
	return nil
}

func (m *memStore) Expire(context.Context, time.Time) error { return nil }

func TestCountsByTenantMinuteAndPriority(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 30, 0, time.UTC)
	clk := clock.NewFake(t0)
	st := &memStore{rows: map[Key]Counts{}}
	r := New(Config{WorkerID: "w1"}, st, clk, discardLog)
	r.Started("acme", sundialv1.Priority_PRIORITY_HIGH, 0.0012)
	r.Outcome("acme", sundialv1.Priority_PRIORITY_HIGH, "succeeded")
	r.Started("acme", sundialv1.Priority_PRIORITY_HIGH, 0.2)
	clk.Advance(time.Minute)
	r.Outcome("acme", sundialv1.Priority_PRIORITY_HIGH, "retry_scheduled")
	r.Outcome("zeta", sundialv1.Priority_PRIORITY_UNSPECIFIED, "dead")
	r.Finished("acme")
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	m0 := t0.Unix() / 60 * 60
	first := st.rows[Key{"acme", m0, int16(sundialv1.Priority_PRIORITY_HIGH)}]
	if first.Outcomes[firingstats.Succeeded] != 1 || first.Lateness[2] != 1 || first.Lateness[12] != 1 {
		t.Errorf("first minute: %+v", first)
	}
	if second := st.rows[Key{"acme", m0 + 60, int16(sundialv1.Priority_PRIORITY_HIGH)}]; second.Outcomes[firingstats.Retried] != 1 {
		t.Errorf("second minute: %+v", second)
	}
	// An unspecified priority is counted as the medium it is fired at.
	if z := st.rows[Key{"zeta", m0 + 60, int16(sundialv1.Priority_PRIORITY_MEDIUM)}]; z.Outcomes[firingstats.Dead] != 1 {
		t.Errorf("zeta: %+v (rows %v)", z, st.rows)
	}
	if st.running["acme"] != 1 {
		t.Errorf("running = %v, want acme 1", st.running)
	}
}

func TestAFailedFlushKeepsItsCountsForTheNext(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	st := &memStore{rows: map[Key]Counts{}, fail: true}
	r := New(Config{WorkerID: "w1", MaxPending: 2}, st, clk, discardLog)
	for i := range 3 {
		if i > 0 {
			clk.Advance(time.Minute)
		}
		r.Outcome("acme", sundialv1.Priority_PRIORITY_LOW, "succeeded")
	}
	if err := r.Flush(context.Background()); err == nil {
		t.Fatal("flush to a store that refuses succeeded")
	}
	r.Outcome("acme", sundialv1.Priority_PRIORITY_LOW, "succeeded") // the third minute again
	st.fail = false
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// MaxPending 2: the oldest minute was dropped, the newest has both.
	if len(st.rows) != 2 {
		t.Fatalf("rows %v, want the two newest minutes", st.rows)
	}
	var total int64
	for _, c := range st.rows {
		total += c.Outcomes[firingstats.Succeeded]
	}
	if total != 3 {
		t.Errorf("succeeded %d, want 3 (one minute dropped of four counts)", total)
	}
}

// The group's lag is written with the next flush after a read, once: a
// flush with no read since writes none (the row's age then says the read
// stopped), and a failed flush keeps it for the next unless a newer read
// came.
func TestLagIsWrittenOncePerRead(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	st := &memStore{rows: map[Key]Counts{}}
	r := New(Config{WorkerID: "w1"}, st, clk, discardLog)
	ctx := context.Background()
	r.SetLag(map[string]int64{"fire.high": 7})
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(st.lags) != 1 || st.lags[0]["fire.high"] != 7 {
		t.Fatalf("lags written %v, want one {fire.high: 7}", st.lags)
	}
	st.fail = true
	r.SetLag(map[string]int64{"fire.high": 8})
	if err := r.Flush(ctx); err == nil {
		t.Fatal("flush to a store that refuses succeeded")
	}
	st.fail = false
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(st.lags) != 2 || st.lags[1]["fire.high"] != 8 {
		t.Fatalf("lags written %v, want the kept read written next", st.lags)
	}
	st.fail = true
	r.SetLag(map[string]int64{"fire.high": 9})
	if err := r.Flush(ctx); err == nil {
		t.Fatal("flush to a store that refuses succeeded")
	}
	r.SetLag(map[string]int64{"fire.high": 10})
	st.fail = false
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(st.lags) != 3 || st.lags[2]["fire.high"] != 10 {
		t.Fatalf("lags written %v, want the newer read, not the failed one", st.lags)
	}
}

func TestNilRollupCountsNothing(t *testing.T) {
	var r *Rollup
	r.SetLag(map[string]int64{"fire.low": 1})
	r.Outcome("acme", sundialv1.Priority_PRIORITY_LOW, "succeeded")
	r.Started("acme", sundialv1.Priority_PRIORITY_LOW, 1)
	r.Finished("acme")
}

// BenchmarkRecordOneFiring is the hot path's cost per firing: the
// attempt's start (lateness, running), its outcome and its end.
func BenchmarkRecordOneFiring(b *testing.B) {
	r := New(Config{WorkerID: "w1"}, &memStore{rows: map[Key]Counts{}}, clock.Real{}, discardLog)
	tenants := []string{"acme", "globex", "initech", "umbrella"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			t := tenants[i%len(tenants)]
			i++
			r.Started(t, sundialv1.Priority_PRIORITY_HIGH, 0.002)
			r.Outcome(t, sundialv1.Priority_PRIORITY_HIGH, "succeeded")
			r.Finished(t)
		}
	})
}
