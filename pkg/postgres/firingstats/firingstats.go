// Package firingstats is the format of the firing_minutes table (migration
// 00026): the per-minute rollup of firings the workers write in groups and
// the console reads when there is no Prometheus. The worker's rollup
// package writes it; the api's console reads it. Both take the outcome
// columns and the lateness buckets from here, so a row means the same
// thing to its writer and its reader.
//
// Lateness is a histogram with fixed bucket bounds rather than a sketch:
// rows of many workers (and of many minutes) merge by adding their
// buckets, exactly, in SQL. A quantile read from the merge is exact to a
// bucket, as Prometheus's histogram_quantile is over the same bounds.
package firingstats

import "math"

// Bounds are the upper bounds, in seconds, of the lateness buckets: the
// worker's Prometheus histogram's (0.5 ms to 60 s; the target is a p50 of
// 2 ms and a p99 of 10 ms). A row's lateness array has one count per bound
// and one more for lateness above the last.
var Bounds = []float64{
	0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025,
	0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// Buckets is the length of a row's lateness array.
var Buckets = len(Bounds) + 1

// Bucket is the index of the bucket lateness (seconds) falls in.
func Bucket(seconds float64) int {
	// A linear scan: 20 bounds, and most firings are in the first few.
	for i, b := range Bounds {
		if seconds <= b {
			return i
		}
	}
	return len(Bounds)
}

// Outcome columns of a row. The worker counts every outcome word its
// stages count (sundial_worker_firings_total's outcome label) into one of
// them.
const (
	Succeeded = iota
	Failed
	Retried
	Dead
	Skipped
	Cancelled
	Other
	NumOutcomes
)

// Columns are the outcome columns' names, by index.
var Columns = [NumOutcomes]string{"succeeded", "failed", "retried", "dead", "skipped", "cancelled", "other"}

// Column is the outcome column an outcome word counts in: the ends of an
// attempt each have their own (succeeded, failed with nothing to follow,
// failed with a retry scheduled, dead-lettered); skipped firings (by the
// overlap policy) and cancelled ones theirs; everything else (fenced,
// stale, duplicate deliveries, poison, lease errors) is Other, counted so
// that a sum of the columns is every firing handled.
func Column(outcome string) int {
	switch outcome {
	case "succeeded":
		return Succeeded
	case "failed":
		return Failed
	case "retry_scheduled":
		return Retried
	case "dead":
		return Dead
	case "overlap_skipped", "misfire_skipped":
		return Skipped
	case "cancelled":
		return Cancelled
	}
	return Other
}

// Quantile is the q-quantile (0 < q < 1), in seconds, of the lateness
// counted in buckets, interpolating linearly inside the bucket it falls
// in (from 0 for the first); NaN when buckets count nothing. Above the
// last bound it answers the last bound: "at least 60 s".
func Quantile(buckets []int64, q float64) float64 {
	var total int64
	for _, n := range buckets {
		total += n
	}
	if total == 0 {
		return math.NaN()
	}
	rank := q * float64(total)
	var seen int64
	for i, n := range buckets {
		if n == 0 || float64(seen+n) < rank {
			seen += n
			continue
		}
		if i >= len(Bounds) {
			return Bounds[len(Bounds)-1]
		}
		lo := 0.0
		if i > 0 {
			lo = Bounds[i-1]
		}
		return lo + (Bounds[i]-lo)*(rank-float64(seen))/float64(n)
	}
	return Bounds[len(Bounds)-1]
}
