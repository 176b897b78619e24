package bench

import (
	"strings"
	"testing"
	"time"
)

func TestRedisGrowthPerFiringAndSteadyState(t *testing.T) {
	a := redisSnap{used: 3 << 20, keys: 10, ok: true}
	b := redisSnap{used: 3<<20 + 30_000_000, keys: 10 + 120_000, ok: true}
	got := redisGrowth(a, b, 60_000, 1000, time.Hour)
	for _, want := range []string{"500 bytes and 2.00 keys per firing over 60000 firings", "≈ 1.68 GiB"} {
		if !strings.Contains(got, want) {
			t.Errorf("redisGrowth = %q, want it to say %q", got, want)
		}
	}
	if got := redisGrowth(redisSnap{}, b, 60_000, 1000, time.Hour); got != "not read" {
		t.Errorf("without a first reading: %q", got)
	}
}

func TestMarkerTTLReadsTheWorkersFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, time.Hour},
		{[]string{"--done-ttl=10m"}, 10 * time.Minute},
		{[]string{"--executors", "8", "--done-ttl", "2h"}, 2 * time.Hour},
	} {
		d := &deployment{r: &Runner{opts: Options{WorkerArgs: tc.args}}}
		if got := d.markerTTL(); got != tc.want {
			t.Errorf("worker args %q: marker TTL %s, want %s", tc.args, got, tc.want)
		}
	}
}
