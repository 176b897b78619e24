//go:build integration

package server

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// A paused one-off job resumed after its instant has no slot left: the
// resume completes it (pkg/postgres/jobcompletion's completion on resume) as a new
// version, with the resume's own audit row and no other, drops the trigger
// staged under the paused version (recorded skipped), publishes the new
// version and wakes nobody. Every column of the row is what the change
// decided, the stored definition included; a completed job cannot be
// resumed again.
func TestIntegrationResumeCompletesAPausedJobWithNoSlotLeft(t *testing.T) {
	clk := &shiftedClock{}
	h := newHarnessWith(t, harnessOptions{storeOptions: []store.Option{store.WithClockShift(clk.shift)}})
	a := as(tokenAcme)
	j := everyMinute("once, then paused")
	j.Schedule = &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(time.Now().Add(time.Hour))}}
	id := h.create(tokenAcme, j).GetId()
	p, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id}, a)
	if err != nil || p.GetJob().GetVersion() != 2 {
		t.Fatalf("pause: %v %v", p.GetJob(), err)
	}
	if _, err := h.client.TriggerJob(h.ctx, &sundialv1.TriggerJobRequest{Id: id}, a); err != nil {
		t.Fatal(err)
	}
	if n := h.outboxRows(id); n != 1 {
		t.Fatalf("outbox rows after the trigger = %d", n)
	}

	// Past the one instant: resume finds no slot left.
	clk.advance(2 * time.Hour)
	r, err := h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: id, ExpectedVersion: 2}, a)
	if err != nil {
		t.Fatal(err)
	}
	job := r.GetJob()
	if job.GetStatus() != sundialv1.JobStatus_JOB_STATUS_COMPLETED || job.GetVersion() != 3 || job.GetNextFireTime() != nil {
		t.Fatalf("resumed job = %v", job)
	}
	at := job.GetUpdateTime().AsTime()
	if time.Until(at) < time.Hour {
		t.Fatalf("update_time %v is not the shifted clock's", at)
	}

	var (
		st, name      string
		version       int64
		next, deleted *time.Time
		updated       time.Time
		spec          []byte
		prio          int16
		labels        map[string]string
	)
	if err := h.pool.QueryRow(h.ctx, `SELECT status, version, next_fire_at, updated_at, deleted_at, spec, name, priority, labels FROM jobs WHERE id = $1`, id).
		Scan(&st, &version, &next, &updated, &deleted, &spec, &name, &prio, &labels); err != nil {
		t.Fatal(err)
	}
	if st != "completed" || version != 3 || next != nil || deleted != nil || !updated.Equal(at) {
		t.Fatalf("row: status %s version %d next_fire_at %v deleted_at %v updated_at %v (want %v)", st, version, next, deleted, updated, at)
	}
	if name != "once, then paused" || prio != int16(sundialv1.Priority_PRIORITY_MEDIUM) || labels["team"] != "billing" || len(labels) != 1 {
		t.Fatalf("row: name %q priority %d labels %v", name, prio, labels)
	}
	// The stored definition is the new version's, as every change writes
	// it (the job without its next fire time).
	stored := &sundialv1.Job{}
	if err := proto.Unmarshal(spec, stored); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(stored, job) {
		t.Fatalf("stored spec = %v\nwant %v", stored, job)
	}

	type auditRow struct {
		actor, action string
		version       int64
		at            time.Time
		detail        []byte
	}
	rows, err := h.pool.Query(h.ctx, `SELECT actor, action, version, at, detail FROM job_audit WHERE job_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	var trail []auditRow
	for rows.Next() {
		var a auditRow
		if err := rows.Scan(&a.actor, &a.action, &a.version, &a.at, &a.detail); err != nil {
			t.Fatal(err)
		}
		trail = append(trail, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, a := range trail {
		actions = append(actions, a.action)
	}
	if len(trail) != 4 || actions[0] != "create" || actions[1] != "pause" || actions[2] != "trigger" {
		t.Fatalf("audit actions = %v", actions)
	}
	last := trail[3]
	var detail, want any
	if err := json.Unmarshal(last.detail, &detail); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"dropped_firings": 1, "skipped_slots": 1, "status": {"from": "paused", "to": "completed"}}`), &want); err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(detail)
	if last.actor != trail[0].actor || last.action != "resume" || last.version != 3 || !last.at.Equal(at) || !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("resume's audit row = %s %s v%d at %v %s", last.actor, last.action, last.version, last.at, last.detail)
	}

	if n := h.outboxRows(id); n != 0 {
		t.Fatalf("outbox rows after the resume = %d", n)
	}
	var reason string
	if err := h.pool.QueryRow(h.ctx, `SELECT reason FROM ledger_pending WHERE job_id = $1 AND status = $2 AND reason <> 'paused'`, id, int16(sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED)).Scan(&reason); err != nil || reason != "job resumed as version 3" {
		t.Fatalf("dropped trigger's record: %q %v", reason, err)
	}
	// The one instant fell in the pause: recorded skipped (paused), under
	// the paused version.
	var slot time.Time
	var pv int64
	if err := h.pool.QueryRow(h.ctx, `SELECT scheduled_at, job_version FROM ledger_pending WHERE job_id = $1 AND reason = 'paused'`, id).Scan(&slot, &pv); err != nil ||
		!slot.Equal(j.GetSchedule().GetOnce().AsTime().Truncate(time.Microsecond)) || pv != 2 {
		t.Fatalf("the paused instant's record: %v v%d %v", slot, pv, err)
	}
	if v := h.versions.of(id); len(v) == 0 || v[len(v)-1] != 3 {
		t.Fatalf("published versions = %v", v)
	}

	g, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: id}, a)
	if err != nil || !proto.Equal(g.GetJob(), job) {
		t.Fatalf("GetJob = %v %v", g.GetJob(), err)
	}
	if _, err := h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: id}, a); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("resume of a completed job: %v", err)
	}
}
