//go:build integration

package server

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// GetJob shows the runs a job with max_runs has left (max_runs less the
// slots the prefetcher counted), and a pause that drops staged-ahead
// firings gives their runs back, in the same transaction; the job's
// schedule, union and exclusions included, round-trips.
func TestIntegrationRemainingRunsAndPauseGivesBackDroppedRuns(t *testing.T) {
	h := newHarness(t, nil)
	a := as(tokenAcme)
	j := everyMinute("limited")
	j.MaxRuns = 10
	j.Schedule.AdditionalSchedules = []*sundialv1.Schedule{{Spec: &sundialv1.Schedule_Cron{Cron: "30 * * * *"}}}
	j.Schedule.Exclusions = []*sundialv1.Exclusion{{Start: "02:00", End: "04:00", Note: "backups"}}
	created := h.create(tokenAcme, j)
	id := created.GetId()
	if created.GetRemainingRuns() != 10 {
		t.Fatalf("created: remaining_runs %d", created.GetRemainingRuns())
	}
	got, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: id}, a)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetJob().GetRemainingRuns() != 10 || len(got.GetJob().GetSchedule().GetAdditionalSchedules()) != 1 ||
		got.GetJob().GetSchedule().GetExclusions()[0].GetNote() != "backups" {
		t.Fatalf("GetJob: %v", got.GetJob())
	}

	// As the prefetcher would: 4 slots staged and counted, 3 of them
	// ahead of now, 1 due a minute ago (not yet published).
	uid := uuid.MustParse(id)
	now := time.Now().UTC().Truncate(time.Second)
	slots := []time.Time{now.Add(-time.Minute), now.Add(time.Minute), now.Add(2 * time.Minute), now.Add(3 * time.Minute)}
	for _, at := range slots {
		if _, err := h.pool.Exec(h.ctx, `INSERT INTO outbox (execution_id, attempt, job_id, job_version, priority, scheduled_at, fire_at, publish_at, catch_up, envelope)
			VALUES ($1, 1, $2, 1, 3, $3, $3, $3, false, '\x00')`, firing.ExecutionID(uid, at), uid, at); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.pool.Exec(h.ctx, `UPDATE jobs SET runs_staged = 4, runs_counted_through = $2 WHERE id = $1`, uid, slots[3]); err != nil {
		t.Fatal(err)
	}
	got, err = h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: id}, a)
	if err != nil || got.GetJob().GetRemainingRuns() != 6 {
		t.Fatalf("GetJob after 4 staged: %v %v", got.GetJob().GetRemainingRuns(), err)
	}

	p, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id}, a)
	if err != nil {
		t.Fatal(err)
	}
	// The three not yet due are given back; the one already due is not
	// (it was the prefetcher's to fire and is not staged again).
	if p.GetJob().GetRemainingRuns() != 9 {
		t.Fatalf("after pause: remaining_runs %d", p.GetJob().GetRemainingRuns())
	}
	var staged int64
	var through time.Time
	if err := h.pool.QueryRow(h.ctx, `SELECT runs_staged, runs_counted_through FROM jobs WHERE id = $1`, uid).Scan(&staged, &through); err != nil {
		t.Fatal(err)
	}
	if staged != 1 || !through.Equal(slots[1].Add(-time.Microsecond)) {
		t.Fatalf("runs_staged %d runs_counted_through %v", staged, through)
	}
}
