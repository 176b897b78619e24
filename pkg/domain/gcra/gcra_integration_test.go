//go:build integration

package gcra_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/domain/gcra"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// reserveScript is gcra.Lua alone, as the worker's limits script embeds it.
var reserveScript = redis.NewScript(gcra.Lua + `
return reserve(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]))
`)

// The same requests through the Go Limiter and the Lua script on the real
// Redis get the same waits, and leave the same TAT: the local fallback
// and the cluster-wide limit are one algorithm.
func TestGoAndLuaDecideAlike(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testinfra.Redis(t)
	rates := map[string]gcra.Rate{
		"host":   gcra.PerSecond(20, 1),
		"tenant": gcra.PerSecond(3, 4), // an interval truncated to the µs
		"api":    gcra.PerSecond(200, 400),
		"fast":   gcra.PerSecond(5e6, 2),
	}
	keys := []string{"host", "tenant", "api", "fast"}
	local := gcra.New()
	rnd := rand.New(rand.NewPCG(27, 3))
	now := time.Now().Truncate(time.Microsecond)
	waited := 0
	for i := range 3000 {
		// Mostly bunched requests, now and then an idle gap.
		step := time.Duration(rnd.IntN(60_000)) * time.Microsecond
		if rnd.IntN(50) == 0 {
			step = time.Duration(rnd.IntN(3_000_000)) * time.Microsecond
		}
		now = now.Add(step)
		k := keys[rnd.IntN(len(keys))]
		r := rates[k]
		goWait := local.Reserve(k, r, now)
		luaWait, err := reserveScript.Run(ctx, rdb, []string{prefix + k}, now.UnixMicro(), r.Interval, r.Burst).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if goWait != time.Duration(luaWait)*time.Microsecond {
			t.Fatalf("request %d of %s at %s: Go waits %s, Lua %dµs", i, k, now.Format(time.RFC3339Nano), goWait, luaWait)
		}
		if goWait > 0 {
			waited++
		}
	}
	if waited < 300 {
		t.Fatalf("only %d of 3000 requests waited: the sequence does not exercise the limit", waited)
	}
	// The TAT each left behind is the same too: the next request of every
	// key, at one instant, waits alike.
	for _, k := range keys {
		r := rates[k]
		luaWait, err := reserveScript.Run(ctx, rdb, []string{prefix + k}, now.UnixMicro(), r.Interval, r.Burst).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if goWait := local.Reserve(k, r, now); goWait != time.Duration(luaWait)*time.Microsecond {
			t.Fatalf("%s: Go waits %s, Lua %dµs", k, goWait, luaWait)
		}
	}
}
