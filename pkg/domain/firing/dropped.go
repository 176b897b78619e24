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
	b := make([]byte, 0, len(job)+64)
	b = append(b, job...)
	b = append(b, '|')
	b = strconv.AppendInt(b, from, 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, to, 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, first, 10)
	return uuid.NewSHA1(droppedNamespace, b).String()
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
