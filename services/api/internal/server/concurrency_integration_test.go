//go:build integration

package server

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// snapshot is what a refused change must leave as it was: the job row,
// its audit trail, its staged firings and what was published to workers.
type snapshot struct {
	version        int64
	name, status   string
	audits, staged int
	published      int
}

func (h *harness) snapshot(jobID string) snapshot {
	h.t.Helper()
	var s snapshot
	err := h.pool.QueryRow(h.ctx, `SELECT version, name, status FROM jobs WHERE id = $1`, jobID).Scan(&s.version, &s.name, &s.status)
	if err != nil {
		h.t.Fatal(err)
	}
	s.audits = h.count(`SELECT count(*) FROM job_audit WHERE job_id = $1`, jobID)
	s.staged = h.outboxRows(jobID)
	s.published = len(h.versions.of(jobID))
	return s
}

// wantVersionConflict checks err is the FailedPrecondition of a stale
// expected_version, naming the current version.
func wantVersionConflict(t *testing.T, err error, current int64) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition {
		t.Fatalf("got %v, want FailedPrecondition", err)
	}
	if want := "the job is at version " + strconv.FormatInt(current, 10); !strings.Contains(st.Message(), want) || !strings.HasPrefix(st.Message(), "expected_version: ") {
		t.Fatalf("message %q does not name the field and %q", st.Message(), want)
	}
	for _, d := range st.Details() {
		if pf, ok := d.(*errdetails.PreconditionFailure); ok && len(pf.GetViolations()) == 1 && pf.GetViolations()[0].GetSubject() == "expected_version" {
			return
		}
	}
	t.Fatalf("no PreconditionFailure on expected_version in %v", st.Details())
}

func TestIntegrationExpectedVersion(t *testing.T) {
	h := newHarness(t, nil)
	a := as(tokenAcme)
	job := h.create(tokenAcme, everyMinute("occ"))
	id := job.GetId()

	// Matching version: the change is made.
	r, err := h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: id, Name: "v2"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}}, ExpectedVersion: 1}, a)
	if err != nil || r.GetJob().GetVersion() != 2 {
		t.Fatalf("update at the expected version: %v %v", r, err)
	}

	// A stale version: refused, naming version 2, and nothing written —
	// not the job, not its audit trail, not its staged firings (a real
	// change would drop them), not a published version.
	h.stageFake(r.GetJob(), 3)
	before := h.snapshot(id)
	_, err = h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: id, Name: "lost"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}}, ExpectedVersion: 1}, a)
	wantVersionConflict(t, err, 2)
	// A version the job never had is as stale as an old one.
	_, err = h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: id, Name: "lost"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}}, ExpectedVersion: 7}, a)
	wantVersionConflict(t, err, 2)
	for _, call := range []func() error{
		func() error {
			_, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id, ExpectedVersion: 1}, a)
			return err
		},
		func() error {
			_, err := h.client.DeleteJob(h.ctx, &sundialv1.DeleteJobRequest{Id: id, ExpectedVersion: 3}, a)
			return err
		},
		// Resuming an active job is a no-op, but a stale version is still
		// refused: the caller's picture of the job is wrong either way.
		func() error {
			_, err := h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: id, ExpectedVersion: 1}, a)
			return err
		},
	} {
		wantVersionConflict(t, call(), 2)
	}
	if after := h.snapshot(id); after != before {
		t.Fatalf("a refused change wrote something:\nbefore %+v\nafter  %+v", before, after)
	}

	// A negative version is bad input, named, and writes nothing.
	_, err = h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: id, Name: "x"}, ExpectedVersion: -1}, a)
	if v := violations(t, err); v["expected_version"] == "" {
		t.Fatalf("violations %v do not name expected_version", v)
	}
	_, err = h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id, ExpectedVersion: -2}, a)
	if v := violations(t, err); v["expected_version"] == "" {
		t.Fatalf("violations %v do not name expected_version", v)
	}
	if after := h.snapshot(id); after != before {
		t.Fatalf("bad input wrote something:\nbefore %+v\nafter  %+v", before, after)
	}

	// The current version passes through pause, resume and delete, each
	// answering the version the next call must expect.
	p, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id, ExpectedVersion: 2}, a)
	if err != nil || p.GetJob().GetVersion() != 3 || p.GetJob().GetStatus() != sundialv1.JobStatus_JOB_STATUS_PAUSED {
		t.Fatalf("pause at the expected version: %v %v", p, err)
	}
	res, err := h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: id, ExpectedVersion: 3}, a)
	if err != nil || res.GetJob().GetVersion() != 4 {
		t.Fatalf("resume at the expected version: %v %v", res, err)
	}
	// Absent (0): today's behaviour, whatever the version.
	u, err := h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: id, Name: "any"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}}}, a)
	if err != nil || u.GetJob().GetVersion() != 5 {
		t.Fatalf("update without expected_version: %v %v", u, err)
	}
	d, err := h.client.DeleteJob(h.ctx, &sundialv1.DeleteJobRequest{Id: id, ExpectedVersion: 5}, a)
	if err != nil || d.GetJob().GetVersion() != 6 || d.GetJob().GetStatus() != sundialv1.JobStatus_JOB_STATUS_DELETED {
		t.Fatalf("delete at the expected version: %v %v", d, err)
	}
	// Another tenant's job stays NotFound, version or not.
	if _, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id, ExpectedVersion: 6}, as(tokenGlobex)); status.Code(err) != codes.NotFound {
		t.Fatalf("another tenant's job: %v", err)
	}
}

// TestIntegrationConcurrentUpdatesOneWins sends updates that all expect
// version 1 while a transaction holds the job's row lock, so every one of
// them is inside Mutate, waiting on the same lock, when it is released:
// exactly one may win, the rest must see the version it made.
func TestIntegrationConcurrentUpdatesOneWins(t *testing.T) {
	h := newHarness(t, nil)
	a := as(tokenAcme)
	id := h.create(tokenAcme, everyMinute("race")).GetId()

	// The blocker and the watcher have connections of their own: the
	// updates take the pool's (4 on a small machine) while they wait.
	connect := func() *pgx.Conn {
		c, err := pgx.ConnectConfig(h.ctx, h.pool.Config().ConnConfig.Copy())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	watcher := connect()
	blocker, err := connect().Begin(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(h.ctx) }()
	if _, err := blocker.Exec(h.ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}

	const n = 3 // fewer than the pool's connections, so all wait in Postgres
	var (
		wg     sync.WaitGroup
		wins   atomic.Int32
		winner atomic.Value
		errs   = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "writer-" + strconv.FormatInt(int64(i), 10)
			r, err := h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: id, Name: name},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}}, ExpectedVersion: 1}, a)
			errs[i] = err
			if err == nil {
				wins.Add(1)
				winner.Store(r.GetJob())
			}
		}()
	}
	// Wait until every update waits on the row lock (Postgres says so in
	// pg_stat_activity), then let them go.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		err := watcher.QueryRow(h.ctx, `
			SELECT count(*) FROM pg_stat_activity
			 WHERE wait_event_type = 'Lock' AND query LIKE '%FROM jobs WHERE tenant = $1 AND id = $2 FOR UPDATE%'
			   AND pid IN (SELECT pid FROM pg_locks WHERE relation = 'jobs'::regclass)`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d updates reached the row lock", waiting, n)
		}
		select {
		case <-h.ctx.Done():
			t.Fatal(h.ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := blocker.Rollback(h.ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	if wins.Load() != 1 {
		t.Fatalf("%d updates won, want exactly 1: %v", wins.Load(), errs)
	}
	for _, err := range errs {
		if err != nil {
			wantVersionConflict(t, err, 2)
		}
	}
	won := winner.Load().(*sundialv1.Job)
	got := h.snapshot(id)
	if got.version != 2 || got.name != won.GetName() || won.GetVersion() != 2 {
		t.Fatalf("stored %+v, winner %v", got, won)
	}
	if n := h.count(`SELECT count(*) FROM job_audit WHERE job_id = $1 AND action = 'update'`, id); n != 1 {
		t.Fatalf("%d update audit rows, want 1", n)
	}
}

// shiftedClock moves the store's clock forward without sleeping.
type shiftedClock struct{ by atomic.Int64 }

func (c *shiftedClock) shift(t time.Time) time.Time { return t.Add(time.Duration(c.by.Load())) }
func (c *shiftedClock) advance(d time.Duration)     { c.by.Add(int64(d)) }

func TestIntegrationIdempotencyKeyMismatch(t *testing.T) {
	h := newHarness(t, nil)
	a := as(tokenAcme)
	req := &sundialv1.CreateJobRequest{Job: everyMinute("idem"), IdempotencyKey: "deploy-7"}
	first, err := h.client.CreateJob(h.ctx, req, a)
	if err != nil {
		t.Fatal(err)
	}
	jobs, audits := h.count(`SELECT count(*) FROM jobs`), h.count(`SELECT count(*) FROM job_audit`)

	// The same job is the same request.
	again, err := h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: proto.Clone(req.GetJob()).(*sundialv1.Job), IdempotencyKey: "deploy-7"}, a)
	if err != nil || again.GetJob().GetId() != first.GetJob().GetId() {
		t.Fatalf("same job: %v %v", again, err)
	}

	// A different job under the same key: refused, naming the field and
	// the job the key made, and nothing written.
	changed := proto.Clone(req).(*sundialv1.CreateJobRequest)
	changed.Job.Payload = []byte(`{"hello":"moon"}`)
	_, err = h.client.CreateJob(h.ctx, changed, a)
	st := status.Convert(err)
	if st.Code() != codes.AlreadyExists || !strings.HasPrefix(st.Message(), "idempotency_key: ") || !strings.Contains(st.Message(), first.GetJob().GetId()) {
		t.Fatalf("different job under a used key: %v", err)
	}
	named := false
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) == 1 && br.GetFieldViolations()[0].GetField() == "idempotency_key" {
			named = true
		}
	}
	if !named {
		t.Fatalf("no BadRequest on idempotency_key in %v", st.Details())
	}
	if j, au := h.count(`SELECT count(*) FROM jobs`), h.count(`SELECT count(*) FROM job_audit`); j != jobs || au != audits {
		t.Fatalf("a refused create wrote: jobs %d→%d, audit %d→%d", jobs, j, audits, au)
	}

	// Concurrent creates with one key and different jobs: one job is
	// made; each other call gets it back (same job) or is refused.
	var wg sync.WaitGroup
	ids := make([]string, 6)
	errs := make([]error, 6)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := everyMinute("race-" + strconv.FormatInt(int64(i%2), 10))
			r, err := h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: j, IdempotencyKey: "race"}, a)
			ids[i], errs[i] = r.GetJob().GetId(), err
		}()
	}
	wg.Wait()
	made := ""
	for i := range ids {
		switch {
		case errs[i] == nil && (made == "" || made == ids[i]):
			made = ids[i]
		case status.Code(errs[i]) == codes.AlreadyExists:
		default:
			t.Fatalf("concurrent create %d: id %q err %v (made %q)", i, ids[i], errs[i], made)
		}
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE idempotency_key = 'race'`); n != 1 || made == "" {
		t.Fatalf("%d jobs hold the raced key (made %q)", n, made)
	}

	// A key used before hashes were kept (NULL) cannot be compared and
	// replays as before.
	if _, err := h.pool.Exec(h.ctx, `UPDATE jobs SET idempotency_hash = NULL WHERE id = $1`, first.GetJob().GetId()); err != nil {
		t.Fatal(err)
	}
	legacy, err := h.client.CreateJob(h.ctx, changed, a)
	if err != nil || legacy.GetJob().GetId() != first.GetJob().GetId() {
		t.Fatalf("key without a hash: %v %v", legacy, err)
	}
}

func TestIntegrationIdempotencyKeyExpires(t *testing.T) {
	clk := &shiftedClock{}
	const ttl = 2 * time.Hour
	h := newHarnessWith(t, harnessOptions{storeOptions: []store.Option{store.WithClockShift(clk.shift)}, idempotencyKeyTTL: ttl})
	a := as(tokenAcme)
	req := &sundialv1.CreateJobRequest{Job: everyMinute("nightly"), IdempotencyKey: "nightly-setup"}
	first, err := h.client.CreateJob(h.ctx, req, a)
	if err != nil {
		t.Fatal(err)
	}
	other := proto.Clone(req).(*sundialv1.CreateJobRequest)
	other.Job.Name = "nightly, take two"

	// Just inside the key's lifetime: still the first job's key.
	clk.advance(ttl - time.Minute)
	if _, err := h.client.CreateJob(h.ctx, other, a); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("a different job inside the key's lifetime: %v", err)
	}
	same, err := h.client.CreateJob(h.ctx, req, a)
	if err != nil || same.GetJob().GetId() != first.GetJob().GetId() {
		t.Fatalf("a retry inside the key's lifetime: %v %v", same, err)
	}

	// Past it: the key is free, and makes a new job whatever the body; the
	// first job loses the key and nothing else.
	clk.advance(2 * time.Minute)
	fresh, err := h.client.CreateJob(h.ctx, other, a)
	if err != nil || fresh.GetJob().GetId() == first.GetJob().GetId() || fresh.GetJob().GetName() != "nightly, take two" {
		t.Fatalf("an expired key: %v %v", fresh, err)
	}
	var key *string
	var version int64
	if err := h.pool.QueryRow(h.ctx, `SELECT idempotency_key, version FROM jobs WHERE id = $1`, first.GetJob().GetId()).Scan(&key, &version); err != nil {
		t.Fatal(err)
	}
	if key != nil || version != 1 {
		t.Fatalf("the first job after its key expired: key %v version %d", key, version)
	}
	// The key now stands for the new job, for a new lifetime.
	clk.advance(ttl - time.Minute)
	again, err := h.client.CreateJob(h.ctx, other, a)
	if err != nil || again.GetJob().GetId() != fresh.GetJob().GetId() {
		t.Fatalf("a retry of the new job: %v %v", again, err)
	}
	if _, err := h.client.CreateJob(h.ctx, req, a); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("the first job's body under the reused key: %v", err)
	}
	if n := h.count(`SELECT count(*) FROM jobs`); n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}
}
