//go:build integration

package limits

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sundialhq/sundial/testkit/testinfra"

	"github.com/sundialhq/sundial/services/worker/internal/hostguard"
)

// The same attempts, admitted and reported in the same order at the same
// instants, through the Go breaker (hostguard.Breaker, the per-process
// fallback) and through the admit and report scripts on the real Redis,
// get the same decisions and leave the same state: one state machine.
func TestGoAndLuaBreakersDecideAlike(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testinfra.Redis(t)
	g := &Guard{cfg: Config{Prefix: prefix}}
	const (
		cool      = int64(time.Second / time.Microsecond)
		threshold = 3
		ttl       = int64(10 * time.Minute / time.Millisecond)
	)
	keys := []string{g.tenantKey("t"), g.hostKey("h"), g.breakerKey("h"), g.slotsKey("h")}
	var br hostguard.Breaker
	rnd := rand.New(rand.NewPCG(27, 2))
	now := time.Now().UnixMicro()
	var inflight []string
	seen := map[string]int{}
	for i := range 3000 {
		now += rnd.Int64N(300_000)
		if rnd.IntN(20) == 0 {
			now += rnd.Int64N(2 * cool)
		}
		if len(inflight) == 0 || rnd.IntN(2) == 0 {
			m := "e" + strconv.Itoa(i) + "/1"
			if len(inflight) > 0 && rnd.IntN(10) == 0 {
				m = inflight[rnd.IntN(len(inflight))] // admitted again before it reported
			}
			pu := now + 100_000 + rnd.Int64N(3*cool)
			res, err := admitScript.Run(ctx, rdb, keys, now, 0, 0, 0, 0, cool, 0, m, pu, ttl).Int64Slice()
			if err != nil {
				t.Fatal(err)
			}
			a := br.Admit(now, m, cool, pu)
			if a.Denied {
				seen["denied "+a.Before.String()]++
				if res[0] != 4 || res[1] != br.Failures || res[2] != a.RetryAt || res[3] != int64(a.Before) {
					t.Fatalf("step %d, admit %s: Lua %v, Go denied %+v (%+v)", i, m, res, a, br)
				}
				continue
			}
			bv := int64(0)
			switch {
			case a.Probe:
				bv = 2
				seen["probe"]++
			case a.Dirty:
				bv = 1
			}
			if res[0] != 0 || res[1] != bv || res[3] != int64(a.Before) {
				t.Fatalf("step %d, admit %s: Lua %v, Go admitted %+v (%+v)", i, m, res, a, br)
			}
			inflight = append(inflight, m)
			continue
		}
		k := rnd.IntN(len(inflight))
		m := inflight[k]
		inflight = append(inflight[:k], inflight[k+1:]...)
		o := []hostguard.Outcome{hostguard.Success, hostguard.Failure, hostguard.Failure, hostguard.Failure, hostguard.Neutral}[rnd.IntN(5)]
		res, err := reportScript.Run(ctx, rdb, keys[2:], now, int(o), m, threshold, ttl, 0, 1).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		before := br.Report(now, m, o, threshold)
		if res[0] != int64(before) || res[1] != int64(br.State) || res[2] != br.Failures {
			t.Fatalf("step %d, report %s %d: Lua %v, Go %s→%+v", i, m, o, res, before, br)
		}
		if before != br.State {
			seen[before.String()+">"+br.State.String()]++
		}
	}
	for _, want := range []string{"closed>open", "half_open>open", "half_open>closed", "denied open", "denied half_open", "probe"} {
		if seen[want] == 0 {
			t.Fatalf("the sequence never reached %q (%v): it does not exercise the machine", want, seen)
		}
	}
	t.Logf("%v", seen)
}
