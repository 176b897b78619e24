// Package offsets tracks, per Kafka partition, which records are still being
// worked on, and so how far the group's committed offset may advance.
//
// A worker holds firings for minutes and finishes them out of order (a
// firing due in a second finishes before one due in a minute that arrived
// earlier). Committing a record's offset tells Kafka that every record
// before it is finished too, so the commit may only advance to the lowest
// offset not yet finished: a crash then redelivers everything unfinished
// (and some finished records, which the lease's done marker drops) but never
// skips one.
package offsets

import (
	"encoding/base64"
	"slices"
	"strings"
	"sync"
)

// Mark is one tracked record. Finish it when its work is over.
type Mark[T any] struct {
	Offset int64
	// Epoch is the record's leader epoch, committed alongside the offset so
	// the broker can detect a truncated log after an unclean election.
	Epoch int32
	// Value is the caller's payload (the held firing), for Pending.
	Value T
	done  bool
}

// Watermark is the set of unfinished records of one partition. It is safe
// for concurrent use.
type Watermark[T any] struct {
	mu sync.Mutex
	// marks in offset order; marks[0] is the lowest unfinished one (finished
	// marks are popped off the front, those behind it wait).
	marks []*Mark[T]
	// next is one past the highest offset tracked, the commit point when
	// nothing is unfinished.
	next      int64
	nextEpoch int32
	seen      bool
	// doneEnd is one past the highest offset ever finished (0: none; Kafka
	// offsets start at 0). No mark from it on is finished, so Done stops
	// its scan there instead of walking the whole held window behind the
	// commit point.
	doneEnd int64
}

// Track records that the record at offset is being worked on. Offsets
// normally arrive in increasing order; an offset already tracked (a
// duplicate fetch across a reassignment) gets its own mark, and the commit
// point stays at the lower of the two until both finish.
func (w *Watermark[T]) Track(offset int64, epoch int32, v T) *Mark[T] {
	m := &Mark[T]{Offset: offset, Epoch: epoch, Value: v}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.marks)
	if n == 0 || w.marks[n-1].Offset <= offset {
		w.marks = append(w.marks, m)
	} else {
		i, _ := slices.BinarySearchFunc(w.marks, offset, func(a *Mark[T], off int64) int {
			switch {
			case a.Offset < off:
				return -1
			case a.Offset > off:
				return 1
			}
			return 0
		})
		w.marks = slices.Insert(w.marks, i, m)
	}
	if !w.seen || offset+1 > w.next {
		w.next, w.nextEpoch, w.seen = offset+1, epoch, true
	}
	return m
}

// Finish marks m finished; finishing twice is harmless.
func (w *Watermark[T]) Finish(m *Mark[T]) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m.done = true
	w.doneEnd = max(w.doneEnd, m.Offset+1)
	i := 0
	for i < len(w.marks) && w.marks[i].done {
		w.marks[i] = nil // let the finished firing be collected
		i++
	}
	w.marks = w.marks[i:]
}

// Commit returns the offset the group may commit (the lowest unfinished
// offset, or one past the highest tracked when everything finished) and its
// epoch. ok is false when nothing was ever tracked: the committed offset, if
// any, must stay where it is.
func (w *Watermark[T]) Commit() (offset int64, epoch int32, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.seen {
		return 0, 0, false
	}
	if len(w.marks) > 0 {
		return w.marks[0].Offset, w.marks[0].Epoch, true
	}
	return w.next, w.nextEpoch, true
}

// Pending calls f for every unfinished mark, lowest offset first. f must not
// call back into the watermark.
func (w *Watermark[T]) Pending(f func(*Mark[T])) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.marks {
		if !m.done {
			f(m)
		}
	}
}

// Len is the number of marks not yet popped (unfinished ones and finished
// ones waiting behind an unfinished one).
func (w *Watermark[T]) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.marks)
}

// Next is one past the highest offset ever tracked; ok is false when
// nothing was. Every record below it was tracked (a partition's records
// arrive in order), so a consumer resuming the partition can skip them.
func (w *Watermark[T]) Next() (offset int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next, w.seen
}

// Done says which records from offset on are finished already, as a bitmap:
// bit i (byte i/8, least significant bit first) is the record at offset+i,
// set when every mark of that offset finished. It covers at most maxBytes*8
// offsets. Committed beside the offset (EncodeDone), it lets the
// partition's next owner pass those records without working them again:
// records finish out of order, and after a burst staged in one go (a mass
// registration's first window) the commit point can trail the finished
// records by thousands. An offset with no mark (not fetched yet) is not
// finished.
func (w *Watermark[T]) Done(offset int64, maxBytes int) []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	var bits []byte
	limit := int64(maxBytes) * 8
	for i := 0; i < len(w.marks); {
		off, all := w.marks[i].Offset, true
		if off >= w.doneEnd {
			break // nothing from here on has finished
		}
		for ; i < len(w.marks) && w.marks[i].Offset == off; i++ {
			all = all && w.marks[i].done
		}
		d := off - offset
		if d < 0 || !all {
			continue
		}
		if d >= limit {
			break
		}
		for int64(len(bits)) <= d/8 {
			bits = append(bits, 0)
		}
		bits[d/8] |= 1 << (d % 8)
	}
	return bits
}

// donePrefix names the encoding of a Done bitmap in a commit's metadata.
const donePrefix = "sundial-done-1:"

// MaxDoneBytes bounds the bitmap committed: 16,384 offsets, 2,731 bytes of
// metadata once encoded, under the brokers' default offset.metadata.max.bytes
// of 4,096.
const MaxDoneBytes = 2048

// EncodeDone is the commit metadata that carries bits ("" for none).
func EncodeDone(bits []byte) string {
	if len(bits) == 0 {
		return ""
	}
	return donePrefix + base64.RawStdEncoding.EncodeToString(bits)
}

// DecodeDone reads what EncodeDone wrote; ok is false for any other
// metadata (none, another client's, a malformed one), which means no record
// beyond the commit point is known to be finished.
func DecodeDone(meta string) (bits []byte, ok bool) {
	s, found := strings.CutPrefix(meta, donePrefix)
	if !found {
		return nil, false
	}
	bits, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil || len(bits) > MaxDoneBytes {
		return nil, false
	}
	return bits, true
}

// DoneAt reports whether bits (from Done or DecodeDone, taken at offset
// from) says the record at offset is finished.
func DoneAt(bits []byte, from, offset int64) bool {
	d := offset - from
	if d < 0 || d/8 >= int64(len(bits)) {
		return false
	}
	return bits[d/8]&(1<<(d%8)) != 0
}
