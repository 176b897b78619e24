package server

import (
	"fmt"
	"math"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/postgres/outbox"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// Paced release of backfills and re-drives.
//
// A backfill or a re-drive can stage up to 100,000 firings at once. Their
// fire instants are spread at rate_per_second from the database clock's
// now — firing i fires at outbox.PacedFireAt(now, i, rate), i steps of
// 1/rate in whole microseconds — so the targets see a steady stream
// rather than a herd. Each firing becomes publishable ReleaseLead before
// its fire instant, the first ones at once (outbox.PublishAt). Both rules
// are the ones the prefetcher's paced catch-ups follow: the relay publishes
// them as they come due and workers hold at most a lead's worth in memory,
// instead of pinning their committed Kafka offsets behind hours of
// future firings. Rows not yet published are also what a later pause,
// update or delete drops (and records as skipped), so such a change stops
// the rest of a long backfill at once.

const (
	// DefaultReleaseLead matches the prefetcher's staging window: paced
	// firings are published no earlier than scheduled ones would be.
	DefaultReleaseLead = 2 * time.Minute
	// DefaultRatePerSecond is the pace when a request does not set one.
	DefaultRatePerSecond = 10.0
	// MaxRatePerSecond bounds the pace a request may ask for.
	MaxRatePerSecond = 10_000.0
	// maxStagedBytes bounds the envelopes one backfill or re-drive writes
	// to the outbox in one transaction (a job's payload may be 256 KiB).
	maxStagedBytes = 256 << 20
)

type pacer struct {
	lead time.Duration
}

// rate checks a request's rate_per_second and applies the default.
func rateOf(field string, r float64) (float64, *jobspec.FieldViolation) {
	switch {
	case r == 0:
		return DefaultRatePerSecond, nil
	case math.IsNaN(r) || math.IsInf(r, 0) || r < 0 || r > MaxRatePerSecond:
		return 0, &jobspec.FieldViolation{Field: field, Description: fmt.Sprintf("must be greater than 0 and at most %g, got %g", MaxRatePerSecond, r)}
	}
	return r, nil
}

// fireAt is the fire instant of the i-th firing of a release starting at
// start.
func (pacer) fireAt(start time.Time, i int, rate float64) time.Time {
	return outbox.PacedFireAt(start, i, rate)
}

// stagedBytes estimates what staging firings writes, to refuse a release
// that would bloat the outbox.
func stagedBytes(firings []store.Staged) int {
	n := 0
	for _, st := range firings {
		n += len(st.Firing.GetPayload()) + 512
	}
	return n
}
