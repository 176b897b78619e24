// Package peers runs other schedulers beside Sundial on the same machine,
// the same components and the same load, and measures them the same way:
// the lateness of every firing at an HTTP sink in the benchmark process,
// what was lost or arrived twice, and what a firing cost in CPU. The peers
// are River's periodic jobs (Postgres), asynq's scheduler (Redis), Sundial
// itself (through the bench harness) and the floor: a bare HTTP client
// firing at the due instants, with nothing in between.
//
// See docs/benchmarks.md, "Peers, side by side".
package peers

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"time"
)

// Shape is how each second's firings are spread.
type Shape string

const (
	// Herd: every job's firing of a second is due at the whole second.
	Herd Shape = "herd"
	// Jittered: each job fires at its own fixed offset within the second,
	// at millisecond granularity, so N jobs spread over the second.
	Jittered Shape = "jittered"
)

// ParseShape reads a shape's name.
func ParseShape(s string) (Shape, error) {
	switch Shape(s) {
	case Herd, Jittered:
		return Shape(s), nil
	}
	return "", fmt.Errorf("peers: unknown shape %q (herd or jittered)", s)
}

// Offset is where within each second job fires: 0 in the herd; in the
// jittered shape a fixed offset in [0, 1 s) at millisecond granularity,
// from a hash of the job's number (so neighbours do not fire in order).
func Offset(shape Shape, job int) time.Duration {
	if shape != Jittered {
		return 0
	}
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(job))
	_, _ = h.Write(b[:])
	return time.Duration(h.Sum64()%1000) * time.Millisecond
}

// firingKey is one firing: a job and its due instant (UnixNano).
type firingKey struct {
	job int
	due int64
}

// Expected is every firing jobs 0..jobs-1 make in the seconds from start
// through end (both truncated to whole seconds): one a job a second, at the
// second plus the job's offset.
func Expected(shape Shape, jobs int, start, end time.Time) map[firingKey]bool {
	start, end = start.Truncate(time.Second), end.Truncate(time.Second)
	want := make(map[firingKey]bool, jobs*(int(end.Sub(start)/time.Second)+1))
	for s := start; !s.After(end); s = s.Add(time.Second) {
		for j := range jobs {
			want[firingKey{j, s.Add(Offset(shape, j)).UnixNano()}] = true
		}
	}
	return want
}

// groups is the jobs by their offset within the second, in order of
// offset: who fires together.
type group struct {
	offset time.Duration
	jobs   []int
}

func groups(shape Shape, jobs int) []group {
	by := map[time.Duration][]int{}
	for j := range jobs {
		o := Offset(shape, j)
		by[o] = append(by[o], j)
	}
	out := make([]group, 0, len(by))
	for o, js := range by {
		out = append(out, group{o, js})
	}
	for i := 1; i < len(out); i++ { // insertion sort: at most 1,000 groups
		for k := i; k > 0 && out[k].offset < out[k-1].offset; k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return out
}

// nextDue is the first instant after t at which a job with offset fires.
func nextDue(t time.Time, offset time.Duration) time.Time {
	n := t.Truncate(time.Second).Add(offset)
	if !n.After(t) {
		n = n.Add(time.Second)
	}
	return n
}
