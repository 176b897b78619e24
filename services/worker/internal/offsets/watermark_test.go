package offsets

import (
	"math/rand/v2"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func commit(t *testing.T, w *Watermark[int]) int64 {
	t.Helper()
	off, _, ok := w.Commit()
	if !ok {
		t.Fatal("Commit: nothing tracked")
	}
	return off
}

func TestEmptyCommitsNothing(t *testing.T) {
	var w Watermark[int]
	if _, _, ok := w.Commit(); ok {
		t.Fatal("an empty watermark must not move the committed offset")
	}
}

func TestCommitStopsAtLowestUnfinished(t *testing.T) {
	var w Watermark[int]
	m := make([]*Mark[int], 0, 5)
	for off := int64(10); off < 15; off++ {
		m = append(m, w.Track(off, 3, int(off)))
	}
	if got := commit(t, &w); got != 10 {
		t.Fatalf("nothing finished: commit %d, want 10", got)
	}
	// Out of order: 12 and 13 finish first; the commit may not pass 10.
	w.Finish(m[2])
	w.Finish(m[3])
	if got := commit(t, &w); got != 10 {
		t.Fatalf("commit %d past unfinished 10", got)
	}
	w.Finish(m[0])
	if got := commit(t, &w); got != 11 {
		t.Fatalf("commit %d, want 11 (11 unfinished)", got)
	}
	w.Finish(m[1])
	if got := commit(t, &w); got != 14 {
		t.Fatalf("commit %d, want 14", got)
	}
	w.Finish(m[4])
	off, epoch, _ := w.Commit()
	if off != 15 || epoch != 3 {
		t.Fatalf("all finished: commit %d epoch %d, want 15 epoch 3", off, epoch)
	}
	if w.Len() != 0 {
		t.Fatalf("Len %d after all finished", w.Len())
	}
	w.Finish(m[4]) // twice is harmless
	if got := commit(t, &w); got != 15 {
		t.Fatalf("commit %d after double finish", got)
	}
}

func TestGapsInOffsets(t *testing.T) {
	// Compacted topics and transaction markers leave gaps.
	var w Watermark[int]
	a := w.Track(5, 0, 0)
	b := w.Track(9, 0, 0)
	w.Finish(a)
	if got := commit(t, &w); got != 9 {
		t.Fatalf("commit %d, want 9", got)
	}
	w.Finish(b)
	if got := commit(t, &w); got != 10 {
		t.Fatalf("commit %d, want 10", got)
	}
}

func TestDuplicateAndOutOfOrderTrack(t *testing.T) {
	var w Watermark[int]
	a := w.Track(20, 1, 0)
	b := w.Track(18, 1, 0) // a stale fetch delivered after a reassignment
	c := w.Track(20, 1, 0) // the same record twice
	if got := commit(t, &w); got != 18 {
		t.Fatalf("commit %d, want 18", got)
	}
	w.Finish(b)
	w.Finish(a)
	if got := commit(t, &w); got != 20 {
		t.Fatalf("commit %d with a duplicate of 20 unfinished, want 20", got)
	}
	w.Finish(c)
	if got := commit(t, &w); got != 21 {
		t.Fatalf("commit %d, want 21", got)
	}
}

func TestPendingListsUnfinished(t *testing.T) {
	var w Watermark[int]
	var marks []*Mark[int]
	for i := range 6 {
		marks = append(marks, w.Track(int64(i), 0, i))
	}
	w.Finish(marks[1])
	w.Finish(marks[4])
	var got []int
	w.Pending(func(m *Mark[int]) { got = append(got, m.Value) })
	want := []int{0, 2, 3, 5}
	if len(got) != len(want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pending %v, want %v", got, want)
		}
	}
}

// Property: whatever order firings finish in, the commit point is always the
// lowest unfinished offset, so it never passes unfinished work, and it never
// goes backwards.
func TestCommitNeverPassesUnfinishedRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var w Watermark[int]
		n := 1 + rng.IntN(200)
		marks := make([]*Mark[int], n)
		off := int64(rng.IntN(1000))
		for i := range marks {
			off += 1 + int64(rng.IntN(3))
			marks[i] = w.Track(off, 0, i)
		}
		finished := make([]bool, n)
		last := int64(-1)
		for _, i := range rng.Perm(n) {
			w.Finish(marks[i])
			finished[i] = true
			got := commit(t, &w)
			want := marks[n-1].Offset + 1
			for j := range marks {
				if !finished[j] {
					want = marks[j].Offset
					break
				}
			}
			if got != want {
				t.Fatalf("round %d: commit %d, want lowest unfinished %d", round, got, want)
			}
			if got < last {
				t.Fatalf("round %d: commit went back from %d to %d", round, last, got)
			}
			last = got
		}
	}
}

// Done marks exactly the finished records from the commit point on: not an
// unfinished one, not one tracked twice with one mark open, not one beyond
// the bound; and what it says survives the commit's metadata.
func TestDoneSaysWhichRecordsPastTheCommitFinished(t *testing.T) {
	var w Watermark[int]
	marks := map[int64]*Mark[int]{}
	for _, off := range []int64{10, 11, 12, 13, 14, 20, 21, 30} {
		marks[off] = w.Track(off, 1, 0)
	}
	dup := w.Track(21, 2, 0) // fetched again across a reassignment
	for _, off := range []int64{12, 14, 20, 21, 30} {
		w.Finish(marks[off])
	}
	commit, _, _ := w.Commit()
	if commit != 10 {
		t.Fatalf("commit %d, want 10", commit)
	}
	bits := w.Done(commit, MaxDoneBytes)
	meta := EncodeDone(bits)
	back, ok := DecodeDone(meta)
	if !ok {
		t.Fatalf("metadata %q does not decode", meta)
	}
	for off := int64(0); off < 40; off++ {
		want := off == 12 || off == 14 || off == 20 || off == 30
		if got := DoneAt(back, commit, off); got != want {
			t.Errorf("offset %d: done %v, want %v", off, got, want)
		}
	}
	w.Finish(dup)
	if !DoneAt(w.Done(commit, MaxDoneBytes), commit, 21) {
		t.Error("21 finished under both marks, not reported done")
	}
	// Bounded: one byte covers offsets 10..17 only.
	if b := w.Done(commit, 1); len(b) != 1 || DoneAt(b, commit, 20) {
		t.Errorf("bounded to one byte: %08b", b)
	}
	// Finishing 10 and 11 moves the commit point; Done follows it.
	w.Finish(marks[10])
	w.Finish(marks[11])
	commit, _, _ = w.Commit()
	if commit != 13 || !DoneAt(w.Done(commit, MaxDoneBytes), commit, 14) || DoneAt(w.Done(commit, MaxDoneBytes), commit, 13) {
		t.Fatalf("after the commit moved to %d: %08b", commit, w.Done(commit, MaxDoneBytes))
	}
	for _, bad := range []string{"", "other client's", "sundial-done-1:***", "sundial-done-1:" + strings.Repeat("A", 4000)} {
		if _, ok := DecodeDone(bad); ok {
			t.Errorf("%.30q decoded", bad)
		}
	}
	if EncodeDone(nil) != "" {
		t.Error("nothing finished should commit no metadata")
	}
}

// Property: whatever order records finish in (duplicates included), Done
// reports exactly the offsets past the commit point whose every mark has
// finished, within its bound — its scan stops at the highest finished
// offset without missing one.
func TestDoneMatchesTheFinishedMarksRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 300 {
		var w Watermark[int]
		n := 1 + rng.IntN(120)
		var marks []*Mark[int]
		off := int64(rng.IntN(50))
		for range n {
			off += int64(rng.IntN(3)) // 0: the same offset tracked twice
			marks = append(marks, w.Track(off, 0, 0))
		}
		finished := map[*Mark[int]]bool{}
		for _, i := range rng.Perm(len(marks))[:rng.IntN(len(marks)+1)] {
			w.Finish(marks[i])
			finished[marks[i]] = true
		}
		commit, _, _ := w.Commit()
		maxBytes := 1 + rng.IntN(4)
		bits := w.Done(commit, maxBytes)
		for o := commit; o < commit+int64(maxBytes)*8+8; o++ {
			tracked, all := false, true
			for _, m := range marks {
				if m.Offset == o {
					tracked = true
					all = all && finished[m]
				}
			}
			want := tracked && all && o-commit < int64(maxBytes)*8
			if got := DoneAt(bits, commit, o); got != want {
				t.Fatalf("round %d: offset %d (commit %d, %d bytes): done %v, want %v", round, o, commit, maxBytes, got, want)
			}
		}
	}
}
