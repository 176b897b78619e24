package prefetch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/leader"
	"github.com/sundialhq/sundial/pkg/lifecycle"
	"github.com/sundialhq/sundial/pkg/rangeleader"
	"github.com/sundialhq/sundial/services/prefetcher/internal/stage"
)

// ValidRanges reports whether the 256 partitions split into n equal
// ranges.
func ValidRanges(n int) bool {
	return n >= 1 && n <= firing.Partitions && firing.Partitions%n == 0
}

// Ranges is the prefetch loop of partitioned prefetch: a
// rangeleader.Coordinator runs Work for each range this process leads, in
// goroutines the coordinator owns, and each stages only its range's
// partitions, fenced by the range's own leader_epochs row (keyed by the
// range's lock path), with the range's share of the catch-up rate and a
// release cursor kept in that row. Ranges itself owns one goroutine, which
// hands each job notification to every range's loop. It is a
// lifecycle.Service; start it before the coordinator and stop it after.
type Ranges struct {
	svc    *Service
	ranges int
	wake   <-chan struct{}
	runner lifecycle.Runner

	mu   sync.Mutex
	subs map[int]chan struct{}
}

// NewRanges returns the partitioned loop for ranges ranges (a divisor of
// 256). The term tasks (retention) run with range 0's term only: they work
// on the whole table and one runner is enough.
func NewRanges(cfg Config, ranges int, stager Stager, wake <-chan struct{}, log *slog.Logger, clk clock.Clock, m *Metrics, tasks ...TermTask) (*Ranges, error) {
	if !ValidRanges(ranges) {
		return nil, fmt.Errorf("ranges: must divide %d partitions, got %d", firing.Partitions, ranges)
	}
	svc, err := New(cfg, nil, stager, nil, log, clk, m, tasks...)
	if err != nil {
		return nil, err
	}
	return &Ranges{svc: svc, ranges: ranges, wake: wake, subs: map[int]chan struct{}{}}, nil
}

// Start runs the notification fan-out.
func (r *Ranges) Start(context.Context) error { return r.runner.Run(r.fanOut) }

// Stop stops the fan-out. Range work is stopped by the coordinator.
func (r *Ranges) Stop() { r.runner.Stop() }

func (r *Ranges) fanOut(ctx context.Context) error {
	if r.wake == nil {
		<-ctx.Done()
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
			r.mu.Lock()
			for _, ch := range r.subs {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
			r.mu.Unlock()
		}
	}
}

// Work is rangeleader.Config.Work: it stages range t.Range until ctx ends.
func (r *Ranges) Work(ctx context.Context, t rangeleader.Term) {
	wake := make(chan struct{}, 1)
	r.mu.Lock()
	r.subs[t.Range] = wake
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.subs, t.Range)
		r.mu.Unlock()
	}()
	lo, hi := rangeleader.Bounds(t.Range, r.ranges, firing.Partitions)
	r.svc.work(ctx, termWork{
		term:       leader.Term{Epoch: t.Epoch, Ctx: ctx, Node: t.Lock},
		election:   t.Lock,
		partitions: &stage.Partitions{Lo: lo, Hi: hi},
		keepCursor: true,
		rate:       r.svc.cfg.CatchUpRate / float64(r.ranges),
		tasks:      t.Range == 0,
		wake:       wake,
		log:        r.svc.log.With("range", t.Range, "partitions", fmt.Sprintf("%d-%d", lo, hi)),
	})
}

// ObserveRanges is the coordinator's OnChange hook.
func (m *Metrics) ObserveRanges(led int) {
	m.RangesLed.Set(float64(led))
	if led > 0 {
		m.Leader.Set(1)
	} else {
		m.Leader.Set(0)
	}
}
