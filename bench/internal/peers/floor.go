package peers

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
)

// floor is the physical floor: the due instants known in the process, a
// timer per instant, and a pool of goroutines POSTing to the sink. No
// lease, no ledger, no queue in a database: what is left of the lateness
// is the machine's (timers, scheduling, loopback HTTP).
type floor struct {
	clock  clock.Clock
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type floorFiring struct {
	job int
	due time.Time
}

func (f *floor) setting() string { return "a timer per due instant, a pool of goroutines POSTing" }

func (f *floor) start(ctx context.Context, cfg peerConfig) error {
	ctx, f.cancel = context.WithCancel(ctx)
	gs := groups(cfg.shape, cfg.jobs)
	queue := make(chan floorFiring, cfg.jobs)
	var seq atomic.Int64
	for range cfg.workers {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case fi := <-queue:
					key := "floor-" + strconv.FormatInt(seq.Add(1), 10)
					if err := cfg.post.post(ctx, fi.job, fi.due, key); err != nil && ctx.Err() == nil {
						cfg.log.Warn("floor: post failed", "job", fi.job, "err", err)
					}
				}
			}
		}()
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		sec := f.clock.Now().Truncate(time.Second).Add(time.Second)
		for {
			for _, g := range gs {
				due := sec.Add(g.offset)
				t := f.clock.NewTimer(due.Sub(f.clock.Now()))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C():
				}
				for _, j := range g.jobs {
					select {
					case queue <- floorFiring{j, due}:
					case <-ctx.Done():
						return
					}
				}
			}
			sec = sec.Add(time.Second)
		}
	}()
	return nil
}

func (f *floor) stop(context.Context) error {
	if f.cancel == nil {
		return fmt.Errorf("peers: floor not started")
	}
	f.cancel()
	f.wg.Wait()
	return nil
}

func (f *floor) resolve(a []Arrival) []Arrival { return a }
