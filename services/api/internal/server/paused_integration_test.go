//go:build integration

package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// The slots of an every-minute job that fell in a ten-minute pause are
// recorded at the resume, in its transaction, as SKIPPED (paused)
// ledger_pending rows (which the prefetcher's drainer moves into the
// ledger): one per slot after the last staged one and before the first
// the resumed job fires, each with its slot's execution id, under the
// paused version; the resume's audit row counts them.
func TestIntegrationResumeRecordsThePausedSlots(t *testing.T) {
	clk := &shiftedClock{}
	h := newHarnessWith(t, harnessOptions{storeOptions: []store.Option{store.WithClockShift(clk.shift)}})
	a := as(tokenAcme)
	job := h.create(tokenAcme, everyMinute("paused ten minutes"))
	id := job.GetId()
	created := job.GetCreateTime().AsTime()
	if _, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id}, a); err != nil {
		t.Fatal(err)
	}
	clk.advance(10 * time.Minute)
	r, err := h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: id}, a)
	if err != nil {
		t.Fatal(err)
	}
	next := r.GetJob().GetNextFireTime().AsTime()

	var want []time.Time
	for s := created.Truncate(time.Minute).Add(time.Minute); s.Before(next); s = s.Add(time.Minute) {
		want = append(want, s)
	}
	if len(want) < 9 {
		t.Fatalf("only %d slots in the pause (created %s, next %s)", len(want), created, next)
	}
	rows, err := h.pool.Query(h.ctx, `SELECT execution_id::text, scheduled_at, status, job_version, reason FROM ledger_pending WHERE job_id = $1 ORDER BY scheduled_at`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var exec, reason string
		var at time.Time
		var st int16
		var version int64
		if err := rows.Scan(&exec, &at, &st, &version, &reason); err != nil {
			t.Fatal(err)
		}
		if n >= len(want) {
			t.Fatalf("more rows than slots: %s %s", at, reason)
		}
		if !at.Equal(want[n]) || exec != firing.ExecutionID(uuid.MustParse(id), want[n]).String() ||
			st != int16(sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED) || version != 2 || reason != PausedReason {
			t.Fatalf("row %d: %s %s status %d v%d %q; want slot %s", n, exec, at, st, version, reason, want[n])
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Fatalf("%d rows, want %d", n, len(want))
	}
	if got := h.count(`SELECT count(*) FROM job_audit WHERE job_id = $1 AND action = 'resume' AND (detail->>'skipped_slots')::int = $2`, id, len(want)); got != 1 {
		t.Fatalf("resume audit rows counting %d skipped slots: %d", len(want), got)
	}
	// Resuming an active job records nothing more.
	if _, err := h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: id}, a); err != nil {
		t.Fatal(err)
	}
	if got := h.count(`SELECT count(*) FROM ledger_pending WHERE job_id = $1`, id); got != len(want) {
		t.Fatalf("after a second resume: %d rows", got)
	}
}

// A per-second job paused for two hours: the resume records the 1,000
// most recent slots one by one and one summary row, at the first slot of
// the pause, standing for the 6,000-odd older ones.
func TestIntegrationResumeBoundsALongPause(t *testing.T) {
	clk := &shiftedClock{}
	h := newHarnessWith(t, harnessOptions{storeOptions: []store.Option{store.WithClockShift(clk.shift)}})
	a := as(tokenAcme)
	j := everyMinute("every second, paused two hours")
	j.Schedule = &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "* * * * * *"}}
	job := h.create(tokenAcme, j)
	id := job.GetId()
	if _, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id}, a); err != nil {
		t.Fatal(err)
	}
	clk.advance(2 * time.Hour)
	r, err := h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: id}, a)
	if err != nil {
		t.Fatal(err)
	}
	next := r.GetJob().GetNextFireTime().AsTime()
	first := job.GetCreateTime().AsTime().Truncate(time.Second).Add(time.Second)
	total := int(next.Sub(first) / time.Second)
	if got := h.count(`SELECT count(*) FROM ledger_pending WHERE job_id = $1 AND reason = 'paused'`, id); got != MaxPausedRecords {
		t.Fatalf("%d slots listed one by one, want %d", got, MaxPausedRecords)
	}
	var oldest time.Time
	if err := h.pool.QueryRow(h.ctx, `SELECT min(scheduled_at) FROM ledger_pending WHERE job_id = $1 AND reason = 'paused'`, id).Scan(&oldest); err != nil ||
		!oldest.Equal(next.Add(-MaxPausedRecords*time.Second)) {
		t.Fatalf("the oldest listed slot is %s (%v), want the 1000th before %s", oldest, err, next)
	}
	var at time.Time
	var reason string
	if err := h.pool.QueryRow(h.ctx, `SELECT scheduled_at, reason FROM ledger_pending WHERE job_id = $1 AND reason LIKE 'paused: %'`, id).Scan(&at, &reason); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("paused: %d slots from %s to %s fell in the pause", total-MaxPausedRecords,
		first.UTC().Format(time.RFC3339Nano), oldest.Add(-time.Second).UTC().Format(time.RFC3339Nano))
	if !at.Equal(first) || !strings.HasPrefix(reason, want) {
		t.Fatalf("summary at %s: %q\nwant at %s: %q…", at, reason, first, want)
	}
}
