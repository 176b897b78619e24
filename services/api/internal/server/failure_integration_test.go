//go:build integration

package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/domain/secrets"
	"github.com/sundialhq/sundial/pkg/postgres/outbox"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

func (h *harness) dbNow() time.Time {
	h.t.Helper()
	var now time.Time
	if err := h.pool.QueryRow(h.ctx, `SELECT now()`).Scan(&now); err != nil {
		h.t.Fatal(err)
	}
	return now.UTC()
}

// deadLetter writes a dead_letters row as a worker would after attempt
// lastAttempt of the job's slot died.
func (h *harness) deadLetter(job *sundialv1.Job, slot time.Time, lastAttempt int32, class string, deadAt time.Time) string {
	h.t.Helper()
	execID := firing.ExecutionID(uuid.MustParse(job.GetId()), slot).String()
	f := firing.New(job, firing.Attempt{
		Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE, ExecutionID: execID,
		Scheduled: slot, Fire: slot, Number: lastAttempt, FirstAttempt: 1,
	})
	env, err := firing.Encode(f)
	if err != nil {
		h.t.Fatal(err)
	}
	_, err = h.pool.Exec(h.ctx, `
		INSERT INTO dead_letters (execution_id, tenant, job_id, error_class, last_error, http_status, attempts, last_attempt, envelope, dead_at)
		VALUES ($1, $2, $3, $4, 'HTTP 503 from target', 503, $5, $5, $6, $7)`,
		execID, job.GetTenant(), job.GetId(), class, lastAttempt, env, deadAt)
	if err != nil {
		h.t.Fatal(err)
	}
	return execID
}

type outboxRow struct {
	execID                   string
	attempt                  int32
	version                  int64
	scheduled, fire, publish time.Time
	catchUp                  bool
	env                      *sundialv1.Firing
}

func (h *harness) outbox(jobID string) []outboxRow {
	h.t.Helper()
	rows, err := h.pool.Query(h.ctx, `
		SELECT execution_id::text, attempt, job_version, scheduled_at, fire_at, publish_at, catch_up, envelope
		  FROM outbox WHERE job_id = $1 ORDER BY fire_at, execution_id`, jobID)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var r outboxRow
		var env []byte
		if err := rows.Scan(&r.execID, &r.attempt, &r.version, &r.scheduled, &r.fire, &r.publish, &r.catchUp, &env); err != nil {
			h.t.Fatal(err)
		}
		if r.env, err = firing.Decode(env); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

type auditRow struct {
	Actor, Action string
	Version       int64
	Detail        map[string]any
}

func (h *harness) auditRows(jobID string) []auditRow {
	h.t.Helper()
	rows, err := h.pool.Query(h.ctx, `SELECT actor, action, version, detail FROM job_audit WHERE job_id = $1 ORDER BY id`, jobID)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []auditRow
	for rows.Next() {
		var r auditRow
		if err := rows.Scan(&r.Actor, &r.Action, &r.Version, &r.Detail); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func retrying(name string) *sundialv1.Job {
	j := everyMinute(name)
	j.Retry = &sundialv1.RetryPolicy{MaxAttempts: 3}
	return j
}

// The full re-drive loop on real Postgres: a dead letter a worker wrote is
// listed, inspected, dry-run, re-driven into the outbox under the same
// execution id with a fresh attempt, marked, audited, and hidden from the
// default listing afterwards; the lease store then lets the fresh attempt
// run although the dead round's attempts are finished.
func TestIntegrationRedriveLoop(t *testing.T) {
	h := newHarness(t, nil)
	a := as(tokenAcmeOps)
	job := h.create(tokenAcme, retrying("flaky"))
	other := h.create(tokenAcme, retrying("other"))
	now := h.dbNow()
	slot := now.Add(-time.Hour).Truncate(time.Minute)
	execID := h.deadLetter(job, slot, 3, "http_5xx", now.Add(-50*time.Minute))
	older := h.deadLetter(other, slot, 1, "timeout", now.Add(-55*time.Minute))

	// The job is fixed after the failure: the re-drive fires the fix.
	upd, err := h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{
		Job:        &sundialv1.Job{Id: job.GetId(), Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:9/fixed"}}}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"target"}},
	}, a)
	if err != nil {
		t.Fatal(err)
	}

	// List: newest death first; filters by job, class and range.
	list, err := h.dlq.ListDeadLetters(h.ctx, &sundialv1.ListDeadLettersRequest{}, a)
	if err != nil || len(list.GetDeadLetters()) != 2 || list.GetDeadLetters()[0].GetFiring().GetExecutionId() != execID {
		t.Fatalf("list: %v %v", list, err)
	}
	for name, f := range map[string]*sundialv1.DeadLetterFilter{
		"job":   {JobId: job.GetId()},
		"class": {ErrorClass: "http_5xx"},
		"range": {Since: timestamppb.New(now.Add(-52 * time.Minute)), Until: timestamppb.New(now)},
	} {
		l, err := h.dlq.ListDeadLetters(h.ctx, &sundialv1.ListDeadLettersRequest{Filter: f}, a)
		if err != nil || len(l.GetDeadLetters()) != 1 || l.GetDeadLetters()[0].GetFiring().GetExecutionId() != execID {
			t.Fatalf("filter %s: %v %v", name, l, err)
		}
	}
	// Paging: one per page, the token bound to its filter.
	p1, err := h.dlq.ListDeadLetters(h.ctx, &sundialv1.ListDeadLettersRequest{PageSize: 1}, a)
	if err != nil || len(p1.GetDeadLetters()) != 1 || p1.GetNextPageToken() == "" {
		t.Fatalf("page 1: %v %v", p1, err)
	}
	p2, err := h.dlq.ListDeadLetters(h.ctx, &sundialv1.ListDeadLettersRequest{PageSize: 1, PageToken: p1.GetNextPageToken()}, a)
	if err != nil || len(p2.GetDeadLetters()) != 1 || p2.GetDeadLetters()[0].GetFiring().GetExecutionId() != older || p2.GetNextPageToken() != "" {
		t.Fatalf("page 2: %v %v", p2, err)
	}
	if _, err := h.dlq.ListDeadLetters(h.ctx, &sundialv1.ListDeadLettersRequest{PageSize: 1, PageToken: p1.GetNextPageToken(),
		Filter: &sundialv1.DeadLetterFilter{ErrorClass: "timeout"}}, a); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("token reused with another filter: %v", err)
	}
	got, err := h.dlq.GetDeadLetter(h.ctx, &sundialv1.GetDeadLetterRequest{ExecutionId: execID}, a)
	if err != nil || got.GetDeadLetter().GetAttempts() != 3 || got.GetDeadLetter().GetHttpStatus() != 503 ||
		got.GetDeadLetter().GetErrorClass() != "http_5xx" || got.GetDeadLetter().GetFiring().GetAttempt() != 3 {
		t.Fatalf("get: %v %v", got, err)
	}

	// Another tenant sees none of it.
	g := as(tokenGlobex)
	if l, err := h.dlq.ListDeadLetters(h.ctx, &sundialv1.ListDeadLettersRequest{}, g); err != nil || len(l.GetDeadLetters()) != 0 {
		t.Fatalf("globex lists %v %v", l, err)
	}
	if _, err := h.dlq.GetDeadLetter(h.ctx, &sundialv1.GetDeadLetterRequest{ExecutionId: execID}, g); status.Code(err) != codes.NotFound {
		t.Fatalf("globex gets: %v", err)
	}
	if _, err := h.dlq.RedriveDeadLetters(h.ctx, &sundialv1.RedriveDeadLettersRequest{ExecutionIds: []string{execID}}, g); status.Code(err) != codes.NotFound {
		t.Fatalf("globex re-drives: %v", err)
	}
	if r, err := h.dlq.RedriveDeadLetters(h.ctx, &sundialv1.RedriveDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{}}, g); err != nil || r.GetCount() != 0 {
		t.Fatalf("globex filter re-drive: %v %v", r, err)
	}

	// Dry run: says what, writes nothing.
	dry, err := h.dlq.RedriveDeadLetters(h.ctx, &sundialv1.RedriveDeadLettersRequest{
		Filter: &sundialv1.DeadLetterFilter{JobId: job.GetId()}, DryRun: true}, a)
	if err != nil || !dry.GetDryRun() || dry.GetCount() != 1 || dry.GetExecutionIds()[0] != execID {
		t.Fatalf("dry run: %v %v", dry, err)
	}
	if n := h.outboxRows(job.GetId()); n != 0 {
		t.Fatalf("dry run staged %d rows", n)
	}

	// Re-drive by filter.
	resp, err := h.dlq.RedriveDeadLetters(h.ctx, &sundialv1.RedriveDeadLettersRequest{
		Filter: &sundialv1.DeadLetterFilter{JobId: job.GetId()}}, a)
	if err != nil || resp.GetCount() != 1 || resp.GetExecutionIds()[0] != execID || resp.GetLastReleaseTime() == nil {
		t.Fatalf("re-drive: %v %v", resp, err)
	}
	rows := h.outbox(job.GetId())
	if len(rows) != 1 {
		t.Fatalf("outbox rows: %v", rows)
	}
	r := rows[0]
	if r.execID != execID || r.attempt != 4 || r.version != upd.GetJob().GetVersion() || !r.scheduled.Equal(slot) {
		t.Fatalf("outbox row: %+v", r)
	}
	if r.publish.After(h.dbNow()) || r.fire.Before(r.publish) {
		t.Fatalf("first re-driven firing not due now: %+v", r)
	}
	e := r.env
	if e.GetOrigin() != sundialv1.FiringOrigin_FIRING_ORIGIN_REDRIVE || e.GetFirstAttempt() != 4 || e.GetAttempt() != 4 ||
		e.GetTarget().GetHttp().GetUrl() != "http://127.0.0.1:9/fixed" || e.GetRetry().GetMaxAttempts() != 3 || e.GetCatchUp() {
		t.Fatalf("envelope: %v", e)
	}
	var count int
	var redrivenAt *time.Time
	if err := h.pool.QueryRow(h.ctx, `SELECT redrive_count, redriven_at FROM dead_letters WHERE execution_id = $1`, execID).Scan(&count, &redrivenAt); err != nil || count != 1 || redrivenAt == nil {
		t.Fatalf("dead letter after re-drive: count %d at %v, %v", count, redrivenAt, err)
	}
	audit := h.auditRows(job.GetId())
	last := audit[len(audit)-1]
	if last.Action != "redrive" || last.Actor != "acme/ops" || last.Version != upd.GetJob().GetVersion() || last.Detail["count"] != float64(1) {
		t.Fatalf("audit: %+v", last)
	}
	if got := testutil.ToFloat64(h.metrics.deadLettersRedriven); got != 1 {
		t.Fatalf("re-driven metric = %v", got)
	}

	// Re-driven: out of the default listing, in with include_redriven, and
	// a filter re-drive skips it.
	l, err := h.dlq.ListDeadLetters(h.ctx, &sundialv1.ListDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{JobId: job.GetId()}}, a)
	if err != nil || len(l.GetDeadLetters()) != 0 {
		t.Fatalf("re-driven still listed: %v %v", l, err)
	}
	l, err = h.dlq.ListDeadLetters(h.ctx, &sundialv1.ListDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{JobId: job.GetId(), IncludeRedriven: true}}, a)
	if err != nil || len(l.GetDeadLetters()) != 1 || l.GetDeadLetters()[0].GetRedriveCount() != 1 || l.GetDeadLetters()[0].GetRedriveTime() == nil {
		t.Fatalf("include_redriven: %v %v", l, err)
	}
	again, err := h.dlq.RedriveDeadLetters(h.ctx, &sundialv1.RedriveDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{JobId: job.GetId()}}, a)
	if err != nil || again.GetCount() != 0 {
		t.Fatalf("filter re-drove a re-driven dead letter: %v %v", again, err)
	}
	// Named again while its attempt is still staged: nothing new.
	again, err = h.dlq.RedriveDeadLetters(h.ctx, &sundialv1.RedriveDeadLettersRequest{ExecutionIds: []string{execID}}, a)
	if err != nil || again.GetCount() != 0 || len(h.outbox(job.GetId())) != 1 {
		t.Fatalf("second named re-drive: %v %v", again, err)
	}

	// When it dies again, the worker's upsert moves dead_at past
	// redriven_at: listed again.
	if _, err := h.pool.Exec(h.ctx, `UPDATE dead_letters SET dead_at = now() + interval '1 second', last_attempt = 6, attempts = 3 WHERE execution_id = $1`, execID); err != nil {
		t.Fatal(err)
	}
	l, err = h.dlq.ListDeadLetters(h.ctx, &sundialv1.ListDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{JobId: job.GetId()}}, a)
	if err != nil || len(l.GetDeadLetters()) != 1 {
		t.Fatalf("dead again but not listed: %v %v", l, err)
	}

	// The worker's view (real Redis): the dead round's attempts are
	// finished, the re-driven attempt runs under the same execution id.
	ex := lease.Execution{JobID: job.GetId(), ExecutionID: execID, Attempt: 3, Version: upd.GetJob().GetVersion()}
	if err := h.lease.PublishVersion(h.ctx, job.GetId(), upd.GetJob().GetVersion()); err != nil {
		t.Fatal(err)
	}
	if res, err := h.lease.Acquire(h.ctx, ex, "w1", time.Minute); err != nil || res.Outcome != lease.Acquired {
		t.Fatalf("acquire attempt 3: %v %v", res, err)
	}
	if err := h.lease.MarkAttemptDone(h.ctx, ex, "w1", time.Hour); err != nil {
		t.Fatal(err)
	}
	ex.Attempt, ex.FirstAttempt = e.GetAttempt(), e.GetFirstAttempt()
	if res, err := h.lease.Acquire(h.ctx, ex, "w2", time.Minute); err != nil || res.Outcome != lease.Acquired {
		t.Fatalf("re-driven attempt: %v %v", res, err)
	}
}

// Re-drives are paced: fire instants rate_per_second apart, each
// publishable the release lead before it; limit takes the oldest deaths
// first; deleted jobs' dead letters are skipped by a filter and refused by
// id; unknown ids are NotFound and abort the whole re-drive.
func TestIntegrationRedrivePacingAndLimits(t *testing.T) {
	h := newHarnessWith(t, harnessOptions{releaseLead: time.Second})
	a := as(tokenAcme)
	job := h.create(tokenAcme, retrying("paced"))
	now := h.dbNow()
	var ids []string
	for i := range 5 {
		slot := now.Add(-time.Duration(10-i) * time.Minute).Truncate(time.Minute)
		ids = append(ids, h.deadLetter(job, slot, 1, "timeout", now.Add(-time.Duration(10-i)*time.Minute)))
	}
	resp, err := h.dlq.RedriveDeadLetters(h.ctx, &sundialv1.RedriveDeadLettersRequest{
		Filter: &sundialv1.DeadLetterFilter{}, RatePerSecond: 0.5, Limit: 4}, a)
	if err != nil || resp.GetCount() != 4 || !slices.Equal(resp.GetExecutionIds(), ids[:4]) {
		t.Fatalf("re-drive: %v %v (want %v)", resp, err, ids[:4])
	}
	rows := h.outbox(job.GetId())
	if len(rows) != 4 {
		t.Fatalf("%d rows", len(rows))
	}
	start := rows[0].fire
	for i, r := range rows {
		if r.execID != ids[i] {
			t.Fatalf("row %d is %s, want %s (oldest death first)", i, r.execID, ids[i])
		}
		if want := start.Add(time.Duration(i) * 2 * time.Second); !r.fire.Equal(want) {
			t.Fatalf("row %d fires at %v, want %v (0.5/s)", i, r.fire, want)
		}
		if want := r.fire.Add(-time.Second); i > 0 && !r.publish.Equal(want) {
			t.Fatalf("row %d publishable at %v, want %v (lead 1s)", i, r.publish, want)
		}
	}
	if !resp.GetLastReleaseTime().AsTime().Equal(rows[3].fire) {
		t.Fatalf("last_release_time %v, want %v", resp.GetLastReleaseTime().AsTime(), rows[3].fire)
	}

	// Unknown ids abort everything, even with a known one beside them.
	missing := uuid.NewString()
	_, err = h.dlq.RedriveDeadLetters(h.ctx, &sundialv1.RedriveDeadLettersRequest{ExecutionIds: []string{ids[4], missing}}, a)
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), missing) {
		t.Fatalf("unknown id: %v", err)
	}
	if n := h.count(`SELECT count(*) FROM dead_letters WHERE redriven_at IS NOT NULL`); n != 4 {
		t.Fatalf("%d dead letters marked after a refused re-drive", n)
	}

	// A deleted job's dead letters: skipped by a filter, refused by id.
	if _, err := h.client.DeleteJob(h.ctx, &sundialv1.DeleteJobRequest{Id: job.GetId()}, a); err != nil {
		t.Fatal(err)
	}
	r, err := h.dlq.RedriveDeadLetters(h.ctx, &sundialv1.RedriveDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{}}, a)
	if err != nil || r.GetCount() != 0 {
		t.Fatalf("filter over a deleted job: %v %v", r, err)
	}
	if _, err := h.dlq.RedriveDeadLetters(h.ctx, &sundialv1.RedriveDeadLettersRequest{ExecutionIds: []string{ids[4]}}, a); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("named dead letter of a deleted job: %v", err)
	}
	// Purged job: the dead letter stays, nothing to fire it with.
	if _, err := h.pool.Exec(h.ctx, `DELETE FROM jobs WHERE id = $1`, job.GetId()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.dlq.RedriveDeadLetters(h.ctx, &sundialv1.RedriveDeadLettersRequest{ExecutionIds: []string{ids[4]}}, a); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("named dead letter of a purged job: %v", err)
	}
}

// Pause, update, delete and resume drop the job's unpublished firings and,
// in the same transaction, record them in ledger_pending saying why: the
// scheduled slots as one SKIPPED summary row per version they were staged
// at, a trigger as a SKIPPED attempt of its own; a refused change records
// nothing.
func TestIntegrationChangesRecordDroppedFirings(t *testing.T) {
	h := newHarness(t, nil)
	a := as(tokenAcme)
	job := h.create(tokenAcme, everyMinute("dropped"))
	id := job.GetId()
	type row struct {
		exec, reason string
		version      int64
	}
	pending := func() []row {
		rows, err := h.pool.Query(h.ctx, `SELECT execution_id::text, tenant, status, job_version, reason FROM ledger_pending WHERE job_id = $1 ORDER BY id`, id)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []row
		for rows.Next() {
			var r row
			var tenant string
			var st int16
			if err := rows.Scan(&r.exec, &tenant, &st, &r.version, &r.reason); err != nil {
				t.Fatal(err)
			}
			if tenant != "acme" || st != int16(sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED) {
				t.Fatalf("ledger row %s: tenant %s status %d", r.exec, tenant, st)
			}
			out = append(out, r)
		}
		return out
	}
	// summary is the one row recording the slots a change dropped.
	summary := func(why string) row {
		t.Helper()
		var found []row
		for _, r := range pending() {
			if strings.HasSuffix(r.reason, "("+why+")") {
				found = append(found, r)
			}
		}
		if len(found) != 1 {
			t.Fatalf("rows recording %q: %v, want one summary", why, found)
		}
		return found[0]
	}
	base := h.dbNow().Add(time.Hour).Truncate(time.Minute)
	next := 0
	var slots []time.Time
	stage := func(version int64, n int) {
		for range n {
			next++
			slot := base.Add(time.Duration(next) * time.Minute)
			slots = append(slots, slot)
			f := &sundialv1.Firing{ExecutionId: firing.ExecutionID(uuid.MustParse(id), slot).String(), JobId: id, Attempt: 1}
			env, _ := firing.Encode(f)
			if _, err := outbox.Insert(h.ctx, h.pool, []outbox.Row{fakeRow(f, version, slot, env)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// want checks a change's summary: n slots from slots[first] to
	// slots[first+n-1], staged at version from, dropped by version to.
	want := func(why string, n, first int, from, to int64) {
		t.Helper()
		r := summary(why)
		f, l := slots[first], slots[first+n-1]
		if r.exec != firing.DroppedID(id, from, to, f.UnixNano()) || r.version != from ||
			r.reason != firing.DroppedReason(n, f, l, from, to, why) {
			t.Fatalf("%s recorded %+v, want %d slots from %s to %s of version %d", why, r, n, f, l, from)
		}
	}

	stage(1, 2)
	if _, err := h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: id, Name: "renamed"}}, a); err != nil {
		t.Fatal(err)
	}
	want("job updated to version 2", 2, 0, 1, 2)
	// A refused update drops and records nothing.
	stage(2, 1)
	if _, err := h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: id, MaxJitter: durationpb.New(time.Hour)}}, a); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad update: %v", err)
	}
	if n := h.count(`SELECT count(*) FROM ledger_pending WHERE job_id = $1`, id); n != 1 {
		t.Fatalf("refused update recorded: %d rows", n)
	}
	stage(2, 2) // the row left by the refused update, and two more
	if _, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id}, a); err != nil {
		t.Fatal(err)
	}
	want("job paused", 3, 2, 2, 3)
	// A trigger while paused, then resume: the trigger is of the paused
	// version, dropped and recorded as its own attempt.
	tr, err := h.client.TriggerJob(h.ctx, &sundialv1.TriggerJobRequest{Id: id}, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: id}, a); err != nil {
		t.Fatal(err)
	}
	var resumed []string
	for _, r := range pending() {
		if r.reason == "job resumed as version 4" {
			resumed = append(resumed, r.exec)
		}
	}
	if !slices.Equal(resumed, []string{tr.GetExecutionId()}) {
		t.Fatalf("resume recorded %v, want the trigger %s", resumed, tr.GetExecutionId())
	}
	stage(4, 2)
	if _, err := h.client.DeleteJob(h.ctx, &sundialv1.DeleteJobRequest{Id: id}, a); err != nil {
		t.Fatal(err)
	}
	want("job deleted", 2, 5, 4, 5)
	if n := h.count(`SELECT count(*) FROM ledger_pending WHERE job_id = $1`, id); n != 4 {
		t.Fatalf("%d ledger rows for 9 dropped firings, want 4 (three summaries and the trigger)", n)
	}
	if n := h.outboxRows(id); n != 0 {
		t.Fatalf("%d rows left", n)
	}
}

// BackfillJob over a past range: the dry run lists the schedule's slots and
// writes nothing; the real one stages one catch-up BACKFILL firing per slot
// under the slot's own execution id, paced, and audits it; ranges in the
// future or over max_slots are refused by field, writing nothing.
func TestIntegrationBackfill(t *testing.T) {
	h := newHarnessWith(t, harnessOptions{releaseLead: time.Second})
	a := as(tokenAcme)
	job := h.create(tokenAcme, everyMinute("backfill"))
	id := job.GetId()
	now := h.dbNow()
	start := now.Add(-10 * time.Minute).Truncate(time.Minute)
	end := start.Add(5 * time.Minute)
	var want []time.Time
	for t := start; !t.After(end); t = t.Add(time.Minute) {
		want = append(want, t)
	}
	req := &sundialv1.BackfillJobRequest{Id: id, StartTime: timestamppb.New(start), EndTime: timestamppb.New(end), RatePerSecond: 2, DryRun: true}

	dry, err := h.client.BackfillJob(h.ctx, req, a)
	if err != nil {
		t.Fatal(err)
	}
	if !dry.GetDryRun() || dry.GetCount() != 6 || len(dry.GetSlots()) != 6 {
		t.Fatalf("dry run: %v", dry)
	}
	for i, s := range dry.GetSlots() {
		if !s.AsTime().Equal(want[i]) || dry.GetExecutionIds()[i] != firing.ExecutionID(uuid.MustParse(id), want[i]).String() {
			t.Fatalf("slot %d: %v %s", i, s.AsTime(), dry.GetExecutionIds()[i])
		}
	}
	if n := h.outboxRows(id); n != 0 {
		t.Fatalf("dry run staged %d rows", n)
	}
	auditBefore := len(h.auditRows(id))

	req.DryRun = false
	resp, err := h.client.BackfillJob(h.ctx, req, a)
	if err != nil || resp.GetCount() != 6 || resp.GetDryRun() {
		t.Fatalf("backfill: %v %v", resp, err)
	}
	rows := h.outbox(id)
	if len(rows) != 6 {
		t.Fatalf("%d outbox rows", len(rows))
	}
	for i, r := range rows {
		e := r.env
		if r.execID != firing.ExecutionID(uuid.MustParse(id), want[i]).String() || !r.scheduled.Equal(want[i]) || r.attempt != 1 || !r.catchUp {
			t.Fatalf("row %d: %+v", i, r)
		}
		if e.GetOrigin() != sundialv1.FiringOrigin_FIRING_ORIGIN_BACKFILL || !e.GetCatchUp() || e.GetFirstAttempt() != 1 || e.GetJobVersion() != 1 {
			t.Fatalf("envelope %d: %v", i, e)
		}
		if wantFire := rows[0].fire.Add(time.Duration(i) * 500 * time.Millisecond); !r.fire.Equal(wantFire) {
			t.Fatalf("row %d fires at %v, want %v (2/s)", i, r.fire, wantFire)
		}
	}
	audit := h.auditRows(id)
	if len(audit) != auditBefore+1 || audit[len(audit)-1].Action != "backfill" || audit[len(audit)-1].Detail["staged"] != float64(6) {
		t.Fatalf("audit: %+v", audit)
	}

	// A slot that already ran dedupes at the worker: its execution id is
	// the prefetcher's, and the done marker says so.
	ex := lease.Execution{JobID: id, ExecutionID: rows[0].execID, Attempt: 1, Version: 1}
	if err := h.lease.MarkDone(h.ctx, ex, "w1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if res, err := h.lease.Acquire(h.ctx, ex, "w2", time.Minute); err != nil || res.Outcome != lease.AlreadyDone {
		t.Fatalf("backfilled slot that already ran: %v %v", res, err)
	}

	// The same range again: every slot is already staged.
	again, err := h.client.BackfillJob(h.ctx, req, a)
	if err != nil || again.GetCount() != 0 || h.outboxRows(id) != 6 {
		t.Fatalf("repeat: %v %v", again, err)
	}

	refused := map[string]*sundialv1.BackfillJobRequest{
		"end_time":  {Id: id, StartTime: timestamppb.New(start), EndTime: timestamppb.New(now.Add(time.Hour))},
		"max_slots": {Id: id, StartTime: timestamppb.New(start), EndTime: timestamppb.New(end), MaxSlots: 3},
	}
	for field, r := range refused {
		_, err := h.client.BackfillJob(h.ctx, r, a)
		if _, ok := violations(t, err)[field]; !ok {
			t.Fatalf("%s: %v", field, err)
		}
	}
	if _, err := h.client.BackfillJob(h.ctx, req, as(tokenGlobex)); status.Code(err) != codes.NotFound {
		t.Fatalf("another tenant's job: %v", err)
	}
	if n := len(h.auditRows(id)); n != auditBefore+2 {
		t.Fatalf("refused backfills audited: %d rows", n)
	}

	// A pause stops the rest of the backfill: its unpublished firings are
	// dropped and recorded.
	if _, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id}, a); err != nil {
		t.Fatal(err)
	}
	if n := h.count(`SELECT count(*) FROM ledger_pending WHERE job_id = $1 AND reason = 'job paused' AND catch_up`, id); n != 6 {
		t.Fatalf("%d backfill firings recorded as dropped, want 6", n)
	}
	if _, err := h.client.DeleteJob(h.ctx, &sundialv1.DeleteJobRequest{Id: id}, a); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.BackfillJob(h.ctx, req, a); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("deleted job: %v", err)
	}
}

// Every change appends an audit row in its own transaction, with the
// actor of the token that made it; ListJobAudit reads them newest first,
// paged, per tenant.
func TestIntegrationAuditTrail(t *testing.T) {
	history := ledgerFake{attempts: []*sundialv1.ExecutionAttempt{{ExecutionId: "e-1", Tenant: "acme", Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED}}}
	h := newHarness(t, history)
	ops, plain := as(tokenAcmeOps), as(tokenAcme)
	job := h.create(tokenAcmeOps, everyMinute("audited"))
	id := job.GetId()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: id, Name: "x", Priority: sundialv1.Priority_PRIORITY_HIGH}}, plain)
	must(err)
	_, err = h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id}, ops)
	must(err)
	_, err = h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id}, ops) // no-op: no row
	must(err)
	_, err = h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: id}, ops)
	must(err)
	_, err = h.client.TriggerJob(h.ctx, &sundialv1.TriggerJobRequest{Id: id}, ops)
	must(err)
	now := h.dbNow()
	_, err = h.client.BackfillJob(h.ctx, &sundialv1.BackfillJobRequest{Id: id, StartTime: timestamppb.New(now.Add(-3 * time.Minute)), EndTime: timestamppb.New(now.Add(-time.Minute))}, ops)
	must(err)
	_, err = h.client.DeleteJob(h.ctx, &sundialv1.DeleteJobRequest{Id: id}, ops)
	must(err)

	var entries []*sundialv1.AuditEntry
	tok := ""
	for pages := 0; ; pages++ {
		resp, err := h.client.ListJobAudit(h.ctx, &sundialv1.ListJobAuditRequest{Id: id, PageSize: 3, PageToken: tok}, ops)
		must(err)
		entries = append(entries, resp.GetEntries()...)
		if tok = resp.GetNextPageToken(); tok == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	type row struct {
		action, actor string
		version       int64
	}
	plainActor := "acme/token:" + auth.Fingerprint(tokenAcme)
	want := []row{
		{"delete", "acme/ops", 5}, {"backfill", "acme/ops", 4}, {"trigger", "acme/ops", 4}, {"resume", "acme/ops", 4},
		{"pause", "acme/ops", 3}, {"update", plainActor, 2}, {"create", "acme/ops", 1},
	}
	if len(entries) != len(want) {
		t.Fatalf("%d entries: %v", len(entries), entries)
	}
	for i, e := range entries {
		if (row{e.GetAction(), e.GetActor(), e.GetVersion()}) != want[i] || e.GetJobId() != id || e.GetTenant() != "acme" || e.GetTime() == nil {
			t.Errorf("entry %d = %v, want %+v", i, e, want[i])
		}
		if i > 0 && e.GetTime().AsTime().After(entries[i-1].GetTime().AsTime()) {
			t.Errorf("entry %d newer than entry %d", i, i-1)
		}
	}
	var detail map[string]any
	if err := json.Unmarshal([]byte(entries[5].GetDetail()), &detail); err != nil {
		t.Fatal(err)
	}
	if paths, _ := detail["paths"].([]any); len(paths) != 2 || paths[0] != "name" || paths[1] != "priority" {
		t.Fatalf("update detail: %v", detail)
	}
	if err := json.Unmarshal([]byte(entries[4].GetDetail()), &detail); err != nil || detail["status"] == nil {
		t.Fatalf("pause detail: %v %v", detail, err)
	}

	if _, err := h.client.ListJobAudit(h.ctx, &sundialv1.ListJobAuditRequest{Id: id}, as(tokenGlobex)); status.Code(err) != codes.NotFound {
		t.Fatalf("another tenant's audit: %v", err)
	}
	if _, err := h.client.ListJobAudit(h.ctx, &sundialv1.ListJobAuditRequest{Id: uuid.NewString()}, ops); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown job: %v", err)
	}
	// The trail outlives the job.
	_, err = h.pool.Exec(h.ctx, `DELETE FROM jobs WHERE id = $1`, id)
	must(err)
	resp, err := h.client.ListJobAudit(h.ctx, &sundialv1.ListJobAuditRequest{Id: id}, ops)
	if err != nil || len(resp.GetEntries()) != len(want) {
		t.Fatalf("purged job's trail: %v %v", resp, err)
	}
	// So does its history, for its owner only.
	hist, err := h.client.ListExecutions(h.ctx, &sundialv1.ListExecutionsRequest{JobId: id}, ops)
	if err != nil || len(hist.GetAttempts()) != 1 {
		t.Fatalf("purged job's history: %v %v", hist, err)
	}
	if _, err := h.client.ListExecutions(h.ctx, &sundialv1.ListExecutionsRequest{JobId: id}, as(tokenGlobex)); status.Code(err) != codes.NotFound {
		t.Fatalf("another tenant's purged job's history: %v", err)
	}
}

// Quotas refuse with ResourceExhausted naming the quota and write nothing;
// max_jobs holds under concurrent creates through two api replicas.
func TestIntegrationQuotas(t *testing.T) {
	f, err := quotas.ParseFile([]byte(`
tenants:
  acme: {max_jobs: 4, min_interval: 1m}
  globex: {create_rate_per_minute: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	q, err := quotas.Resolve(quotas.DefaultLimits(), f)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, harnessOptions{quotas: q})
	h2 := newHarnessWith(t, harnessOptions{quotas: q, pool: h.pool}) // a second replica
	a := as(tokenAcme)

	// min_interval, on create and on update.
	fast := everyMinute("fast")
	fast.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "*/30 * * * * *"}
	_, err = h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: fast}, a)
	if status.Code(err) != codes.ResourceExhausted || !strings.HasPrefix(status.Convert(err).Message(), "quota min_interval: ") {
		t.Fatalf("min_interval: %v", err)
	}
	job := h.create(tokenAcme, everyMinute("slow"))
	_, err = h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: job.GetId(), Schedule: fast.GetSchedule()}}, a)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("min_interval on update: %v", err)
	}

	// max_jobs under a race of 8 creates across two replicas: exactly
	// three more fit.
	var wg sync.WaitGroup
	codesSeen := make([]codes.Code, 8)
	for i := range codesSeen {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := h.client
			if i%2 == 1 {
				c = h2.client
			}
			_, err := c.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: everyMinute("race")}, a)
			codesSeen[i] = status.Code(err)
		}()
	}
	wg.Wait()
	ok, exhausted := 0, 0
	for _, c := range codesSeen {
		switch c {
		case codes.OK:
			ok++
		case codes.ResourceExhausted:
			exhausted++
		default:
			t.Fatalf("unexpected code %v", c)
		}
	}
	if ok != 3 || exhausted != 5 {
		t.Fatalf("%d created, %d refused; want 3 and 5", ok, exhausted)
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE tenant = 'acme'`); n != 4 {
		t.Fatalf("acme has %d jobs, limit 4", n)
	}
	if n := h.count(`SELECT count(*) FROM job_audit WHERE tenant = 'acme' AND action = 'create'`); n != 4 {
		t.Fatalf("%d create audit rows", n)
	}
	_, err = h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: everyMinute("one more")}, a)
	if msg := status.Convert(err).Message(); status.Code(err) != codes.ResourceExhausted || msg != "quota max_jobs: tenant acme has 4 jobs (limit 4); delete some, or ask for a higher limit" {
		t.Fatalf("max_jobs: %v", err)
	}
	// A deleted job frees its place.
	if _, err := h.client.DeleteJob(h.ctx, &sundialv1.DeleteJobRequest{Id: job.GetId()}, a); err != nil {
		t.Fatal(err)
	}
	h.create(tokenAcme, everyMinute("in its place"))

	// create_rate: globex may create two a minute.
	h.create(tokenGlobex, everyMinute("g1"))
	h.create(tokenGlobex, everyMinute("g2"))
	_, err = h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: everyMinute("g3")}, as(tokenGlobex))
	if status.Code(err) != codes.ResourceExhausted || !strings.HasPrefix(status.Convert(err).Message(), "quota create_rate: ") {
		t.Fatalf("create_rate: %v", err)
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE tenant = 'globex'`); n != 2 {
		t.Fatalf("globex has %d jobs", n)
	}
	rejections := testutil.ToFloat64(h.metrics.quotaRejections.WithLabelValues(quotas.MaxJobs)) +
		testutil.ToFloat64(h2.metrics.quotaRejections.WithLabelValues(quotas.MaxJobs))
	if rejections != 6 {
		t.Fatalf("max_jobs rejections = %v, want 6", rejections)
	}
}

// Header values may carry {{secret:NAME}} references: stored and returned
// as references, malformed ones refused by field; callback_url is
// validated and carried to the firing. Nothing the api logs holds a
// header value.
func TestIntegrationSecretsAndCallback(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	h := newHarness(t, nil)
	logger := slog.New(slog.NewJSONHandler(lockedWriter{w: &logs, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dir := t.TempDir()
	writeSecretFile(t, dir, "acme", "billing_token")
	jobs, err := NewJobService(Config{Store: store.New(h.pool), Versions: h.versions, Logger: logger, Secrets: secrets.Dir(dir)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := auth.WithActor(auth.WithTenant(h.ctx, "acme"), "acme/test")

	j := everyMinute("secret")
	j.GetTarget().GetHttp().Headers = map[string]string{
		"Authorization": "Bearer {{secret:billing_token}}",
		"X-Plain":       "plaintext-value-the-user-chose",
	}
	j.CallbackUrl = "https://hooks.example/done"
	created, err := jobs.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: j})
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: created.GetJob().GetId()}, as(tokenAcme))
	if err != nil || got.GetJob().GetTarget().GetHttp().GetHeaders()["Authorization"] != "Bearer {{secret:billing_token}}" ||
		got.GetJob().GetCallbackUrl() != "https://hooks.example/done" {
		t.Fatalf("stored job: %v %v", got, err)
	}
	tr, err := jobs.TriggerJob(ctx, &sundialv1.TriggerJobRequest{Id: created.GetJob().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	rows := h.outbox(created.GetJob().GetId())
	if len(rows) != 1 || rows[0].execID != tr.GetExecutionId() || rows[0].env.GetCallbackUrl() != "https://hooks.example/done" ||
		rows[0].env.GetTarget().GetHttp().GetHeaders()["Authorization"] != "Bearer {{secret:billing_token}}" {
		t.Fatalf("firing: %v", rows)
	}
	if _, err := jobs.UpdateJob(ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: created.GetJob().GetId(), Name: "renamed"}}); err != nil {
		t.Fatal(err)
	}

	bad := everyMinute("bad")
	bad.GetTarget().GetHttp().Headers = map[string]string{"Authorization": "Bearer {{secret:has space}}"}
	bad.CallbackUrl = "ftp://nope"
	_, err = h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: bad}, as(tokenAcme))
	v := violations(t, err)
	if _, ok := v[`target.http.headers["Authorization"]`]; !ok {
		t.Fatalf("malformed reference: %v", v)
	}
	if _, ok := v["callback_url"]; !ok {
		t.Fatalf("bad callback_url: %v", v)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if out == "" {
		t.Fatal("nothing logged; the check below would prove nothing")
	}
	for _, s := range []string{"plaintext-value-the-user-chose", "billing_token"} {
		if strings.Contains(out, s) {
			t.Fatalf("the api logged a header value (%s):\n%s", s, out)
		}
	}
}

func writeSecretFile(t *testing.T, dir, tenant, name string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, tenant), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, tenant, name), []byte("value-of-"+tenant+"-"+name), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Target secrets belong to a tenant: a job may reference only its own
// tenant's. A globex job naming acme's billing_token is refused on create
// and on update with InvalidArgument naming the header, and nothing is
// written (no job, no outbox row, no audit entry, no version bump); an api
// without a secret catalog refuses every reference.
func TestIntegrationSecretsAreScopedByTenant(t *testing.T) {
	dir := t.TempDir()
	writeSecretFile(t, dir, "acme", "billing_token")
	writeSecretFile(t, dir, "globex", "globex_token")
	h := newHarnessWith(t, harnessOptions{secrets: secrets.Dir(dir)})
	withRef := func(name, ref string) *sundialv1.Job {
		j := everyMinute(name)
		j.GetTarget().GetHttp().Headers = map[string]string{"Authorization": "Bearer " + ref, "X-Plain": "plain"}
		return j
	}
	const field = `target.http.headers["Authorization"]`

	// Each tenant may use its own secret.
	h.create(tokenAcme, withRef("acme-own", "{{secret:billing_token}}"))
	own := h.create(tokenGlobex, withRef("globex-own", "{{secret:globex_token}}"))

	// globex names acme's secret: refused, nothing written.
	before := h.count(`SELECT count(*) FROM job_audit`)
	_, err := h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: withRef("steal", "{{secret:billing_token}}")}, as(tokenGlobex))
	v := violations(t, err)
	if d, ok := v[field]; !ok || !strings.Contains(d, `"billing_token"`) || strings.Contains(d, "value-of-") {
		t.Fatalf("create naming acme's secret: %v", v)
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE tenant = 'globex'`); n != 1 {
		t.Fatalf("globex has %d jobs, want 1", n)
	}
	if n := h.count(`SELECT count(*) FROM job_audit`); n != before {
		t.Fatalf("the refused create wrote %d audit entries", n-before)
	}

	// Nor can globex point its own job at it, through the whole target
	// or the headers alone.
	for _, mask := range []string{"target", "target.http.headers"} {
		_, err = h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{
			Job:        &sundialv1.Job{Id: own.GetId(), Target: withRef("x", "x {{secret:billing_token}}").GetTarget()},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{mask}},
		}, as(tokenGlobex))
		if v := violations(t, err); !strings.Contains(v[field], `"billing_token"`) {
			t.Fatalf("update (%s) naming acme's secret: %v", mask, v)
		}
	}
	got, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: own.GetId()}, as(tokenGlobex))
	if err != nil || got.GetJob().GetVersion() != own.GetVersion() ||
		got.GetJob().GetTarget().GetHttp().GetHeaders()["Authorization"] != "Bearer {{secret:globex_token}}" {
		t.Fatalf("the refused update changed the job: %v %v", got, err)
	}
	if n := h.count(`SELECT count(*) FROM job_audit`); n != before {
		t.Fatalf("the refused updates wrote %d audit entries", n-before)
	}
	// An update not touching the target is not held to it.
	if _, err := h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: own.GetId(), Name: "renamed"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}}}, as(tokenGlobex)); err != nil {
		t.Fatal(err)
	}

	// Without a catalog no reference can be shown to be the tenant's.
	bare := newHarnessWith(t, harnessOptions{pool: h.pool})
	_, err = bare.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: withRef("acme-bare", "{{secret:billing_token}}")}, as(tokenAcme))
	if v := violations(t, err); !strings.Contains(v[field], "no secret catalog") {
		t.Fatalf("api without a catalog: %v", v)
	}
	if _, err := bare.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: withRef("acme-plain", "plain-token")}, as(tokenAcme)); err != nil {
		t.Fatalf("a job without references: %v", err)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// The re-driven attempt is above every attempt of the dead round, even
// when the row's last_attempt lags the envelope's (the worker would treat
// an attempt at or below a finished one as a duplicate and never run it).
func TestIntegrationRedriveAttemptAboveTheDeadRound(t *testing.T) {
	h := newHarness(t, nil)
	job := h.create(tokenAcme, retrying("lagging"))
	now := h.dbNow()
	execID := h.deadLetter(job, now.Add(-time.Hour).Truncate(time.Minute), 5, "poison", now)
	if _, err := h.pool.Exec(h.ctx, `UPDATE dead_letters SET last_attempt = 2 WHERE execution_id = $1`, execID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.dlq.RedriveDeadLetters(h.ctx, &sundialv1.RedriveDeadLettersRequest{ExecutionIds: []string{execID}}, as(tokenAcme)); err != nil {
		t.Fatal(err)
	}
	rows := h.outbox(job.GetId())
	if len(rows) != 1 || rows[0].attempt != 6 || rows[0].env.GetFirstAttempt() != 6 {
		t.Fatalf("re-driven rows: %+v", rows)
	}
}
