package bench

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/testkit/harness"
)

func TestFiredAfterDeleteJudgesTheInstantAndTheStragglers(t *testing.T) {
	const jitter = time.Second
	ack := time.Date(2026, 11, 30, 10, 0, 0, 400_000_000, time.UTC)
	deleted, other := uuid.New(), uuid.New()
	ids := map[uuid.UUID]bool{deleted: true}
	// at returns a delivery of job whose instant (slot plus its jitter)
	// falls in the second from want, received recv after the ack.
	at := func(job uuid.UUID, want time.Time, recv time.Duration) harness.Delivery {
		slot := want.Truncate(time.Second)
		for slot.Add(firing.Jitter(job, slot, jitter)).Before(want) {
			slot = slot.Add(time.Second)
		}
		return harness.Delivery{JobID: job, Scheduled: slot, Received: ack.Add(recv)}
	}
	dls := []harness.Delivery{
		// Due two to three seconds before the ack, sent before it,
		// arriving 300 ms after on a busy machine: an attempt already
		// running finishes.
		at(deleted, ack.Add(-3*time.Second), 300*time.Millisecond),
		// Due two seconds or more after the ack: the deletion had reached
		// the worker.
		at(deleted, ack.Add(2*time.Second), 2005*time.Millisecond),
		// Due long before, still arriving 3 s after the ack: it was held
		// late and should have been dropped with the rest.
		at(deleted, ack.Add(-10*time.Second), 3*time.Second),
		// Another job's firings are not the deletion's business.
		at(other, ack.Add(5*time.Second), 5*time.Second),
	}
	for i, dl := range dls[:3] {
		due := dl.Scheduled.Add(firing.Jitter(dl.JobID, dl.Scheduled, jitter))
		if i == 1 && due.Before(ack.Add(2*time.Second)) || i != 1 && !due.Before(ack.Add(-time.Second)) {
			t.Fatalf("delivery %d due at ack%+v: the fixture is wrong", i, due.Sub(ack))
		}
	}
	late, lingered := firedAfterDelete(dls, ids, ack, jitter)
	if late != 1 || lingered != 1 {
		t.Fatalf("late %d, lingered %d; want 1 and 1", late, lingered)
	}
	if late, lingered := firedAfterDelete(dls[:1], ids, ack, jitter); late != 0 || lingered != 0 {
		t.Fatalf("a firing sent before the deletion and arriving after it was counted: late %d, lingered %d", late, lingered)
	}
}
