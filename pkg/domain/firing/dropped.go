package firing

import (
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// A job paused, updated or deleted leaves firings staged under its old
// version: the api drops those still in the outbox, the worker those
// already published. Either records them as one SKIPPED summary row per
// job, version change and group — "N slots due from T1 to T2 dropped" —
// instead of one row per firing, so deleting a per-second job with two
// minutes staged costs its history one row, not 120.

// droppedNamespace derives the summary rows' execution ids, apart from
// every firing's.
var droppedNamespace = uuid.MustParse("b7e4a3f0-5c2d-4e1b-8f6a-2d9c0e7b1a53")

// DroppedID is the execution id of the summary row of job's firings staged
// at version from, dropped when it became version to, the first of them
// due at first (Unix ns). It is stable, so a group summarized again (after
// a redelivery) overwrites its row rather than adding one, and it is never
// a real execution's id. The api and the workers drop disjoint firings (the
// outbox's and Kafka's), so their groups' first instants differ.
func DroppedID(job string, from, to, first int64) string {
	return derivedID(droppedNamespace, job, from, to, first)
}

// derivedID is the name-based id of job and the numbers in ns.
func derivedID(ns uuid.UUID, job string, nums ...int64) string {
	b := make([]byte, 0, len(job)+21*len(nums))
	b = append(b, job...)
	for _, n := range nums {
		b = append(b, '|')
		b = strconv.AppendInt(b, n, 10)
	}
	return uuid.NewSHA1(ns, b).String()
}

// DroppedReason is the summary row's reason: n slots due from first to
// last, staged at version from, dropped when the job became version to;
// why says what the change was ("job deleted").
func DroppedReason(n int, first, last time.Time, from, to int64, why string) string {
	slots := "slots"
	if n == 1 {
		slots = "slot"
	}
	return fmt.Sprintf("%d %s due from %s to %s dropped: job version %d superseded by %d (%s)",
		n, slots, first.UTC().Format(time.RFC3339Nano), last.UTC().Format(time.RFC3339Nano), from, to, why)
}

// A worker behind sheds the late firings its jobs' misfire policies do not
// fire, thousands a second; it records them as one SKIPPED summary row per
// job, version and few seconds — "N slots from T1 to T2 reached the worker
// late and were skipped" (misfire.Policy.LateSummaryReason) — instead of
// one row per firing.

// shedNamespace derives the late summary rows' execution ids, apart from
// every firing's and from the dropped summaries'.
var shedNamespace = uuid.MustParse("5e1d9c27-83a4-4f0b-9b6e-c4a2f71d0e68")

// ShedID is the execution id of the summary row of job's firings staged at
// version, received late and skipped, the first of them due at first
// (Unix ns). Stable like DroppedID: a group summarized again after a
// redelivery overwrites its row.
func ShedID(job string, version, first int64) string {
	return derivedID(shedNamespace, job, version, first)
}
