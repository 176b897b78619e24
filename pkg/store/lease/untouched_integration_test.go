//go:build integration

package lease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// An execution is untouched while no delivery of it holds or held a
// lease that counted, none finished it and nobody asked to cancel it; a
// delivery given back unstarted leaves it untouched again. Asked in one
// batch spanning many jobs (so many slots on the cluster), and it writes
// nothing.
func TestUntouchedMany(t *testing.T) {
	for _, backend := range []struct {
		name string
		open func(t *testing.T) *lease.Store
	}{
		{"redis", func(t *testing.T) *lease.Store {
			rdb, prefix := testinfra.Redis(t)
			return lease.New(rdb, lease.WithPrefix(prefix))
		}},
		{"redis-cluster", func(t *testing.T) *lease.Store {
			rdb, prefix := testinfra.RedisCluster(t)
			return lease.New(rdb, lease.WithPrefix(prefix))
		}},
	} {
		t.Run(backend.name, func(t *testing.T) {
			checkUntouched(t, backend.open(t))
		})
	}
}

func checkUntouched(t *testing.T, s *lease.Store) {
	ctx := context.Background()
	const n = 60
	batch := make([]lease.Execution, n)
	for i := range batch {
		batch[i] = ex(fmt.Sprintf("job-%d", i), fmt.Sprintf("exec-%d", i), 1, 1)
	}
	ask := func(when string, want func(i int) bool) {
		t.Helper()
		got, err := s.UntouchedMany(ctx, batch)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		for i, u := range got {
			if u != want(i) {
				t.Fatalf("%s: entry %d untouched %v, want %v", when, i, u, want(i))
			}
		}
	}
	ask("fresh", func(int) bool { return true })
	ask("asked twice (nothing written by the first)", func(int) bool { return true })

	// Entry i by i mod 6: 0 leased and held, 1 leased then given back
	// unstarted, 2 finished, 3 cancelled, 4 left alone, 5 leased by a
	// delivery that died (its lease ran out, its count stays).
	for i, e := range batch {
		holder := fmt.Sprintf("w/%d", i)
		ttl := 10 * time.Second
		if i%6 == 5 {
			ttl = 20 * time.Millisecond
		}
		switch i % 6 {
		case 0, 1, 2, 5:
			if r, err := s.Acquire(ctx, e, holder, ttl); err != nil || r.Outcome != lease.Acquired {
				t.Fatalf("acquire %d: %+v %v", i, r, err)
			}
		case 3:
			if _, _, err := s.Cancel(ctx, e.JobID, e.ExecutionID, "test"); err != nil {
				t.Fatalf("cancel %d: %v", i, err)
			}
		}
		switch i % 6 {
		case 1:
			if _, err := s.ReleaseMany(ctx, []lease.Release{{Execution: e, Holder: holder, Unstarted: true}}); err != nil {
				t.Fatal(err)
			}
		case 2:
			if err := s.MarkDone(ctx, e, holder, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(50 * time.Millisecond) // the dead deliveries' leases run out
	ask("after leases, give-backs, finishes, cancels and dead deliveries", func(i int) bool { return i%6 == 1 || i%6 == 4 })

	if _, err := s.UntouchedMany(ctx, []lease.Execution{{JobID: "job"}}); err == nil {
		t.Fatal("an execution without an id accepted")
	}
}
