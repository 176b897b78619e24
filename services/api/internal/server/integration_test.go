//go:build integration

package server

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/postgres/jobwake"
	"github.com/sundialhq/sundial/pkg/postgres/outbox"
	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
	"github.com/sundialhq/sundial/testkit/pgtest"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// recordingVersions publishes to real Redis (through pkg/store/lease) and
// remembers what it published, so tests can assert both.
type recordingVersions struct {
	*lease.Store
	mu        sync.Mutex
	published map[string][]int64
}

func (r *recordingVersions) PublishVersion(ctx context.Context, jobID string, version int64) error {
	r.mu.Lock()
	r.published[jobID] = append(r.published[jobID], version)
	r.mu.Unlock()
	return r.Store.PublishVersion(ctx, jobID, version)
}

func (r *recordingVersions) of(jobID string) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.published[jobID])
}

type harness struct {
	t        *testing.T
	pool     *pgxpool.Pool
	rdb      *redis.Client
	lease    *lease.Store
	versions *recordingVersions
	conn     *grpc.ClientConn
	client   sundialv1.JobServiceClient
	dlq      sundialv1.DeadLetterServiceClient
	metrics  *Metrics
	ctx      context.Context
}

const (
	tokenAcme   = "tok-acme"
	tokenGlobex = "tok-globex"
	// tokenAcmeOps is a named token of acme: its actor is "acme/ops".
	tokenAcmeOps = "tok-acme-ops"
)

// harnessOptions vary what newHarnessWith builds.
type harnessOptions struct {
	executions ExecutionReader
	quotas     *quotas.Tenants
	// releaseLead is Config.ReleaseLead (0: the default).
	releaseLead time.Duration
	// pool, when set, is used instead of a fresh schema (a second
	// replica over the same database).
	pool *pgxpool.Pool
	// secrets is Config.Secrets (nil: every reference refused).
	secrets SecretCatalog
	// storeOptions configure the store (a shifted clock).
	storeOptions []store.Option
	// idempotencyKeyTTL is Config.IdempotencyKeyTTL (0: the default).
	idempotencyKeyTTL time.Duration
}

// newHarness runs the real JobService and DeadLetterService over a fresh
// schema behind a real gRPC server on loopback, with the authentication
// interceptor.
func newHarness(t *testing.T, executions ExecutionReader) *harness {
	return newHarnessWith(t, harnessOptions{executions: executions})
}

func newHarnessWith(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	pool := o.pool
	if pool == nil {
		pool = pgtest.Migrated(t)
	}
	rdb, prefix := testinfra.Redis(t)
	ls := lease.New(rdb, lease.WithPrefix(prefix))
	versions := &recordingVersions{Store: ls, published: map[string][]int64{}}
	metrics := NewMetrics(nil)
	st := store.New(pool, o.storeOptions...)
	jobs, err := NewJobService(Config{Store: st, Versions: versions, Executions: o.executions, Quotas: o.quotas,
		ReleaseLead: o.releaseLead, Metrics: metrics, Secrets: o.secrets, IdempotencyKeyTTL: o.idempotencyKeyTTL})
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := NewDeadLetterService(DeadLetterConfig{Store: st, Metrics: metrics, ReleaseLead: o.releaseLead})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.NewTokens(map[string]string{tokenAcme: "acme", tokenGlobex: "globex", tokenAcmeOps: "acme:ops"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewGRPC(GRPCConfig{Addr: "127.0.0.1:0", Tokens: tokens, Jobs: jobs, DeadLetters: dlq, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &harness{t: t, pool: pool, rdb: rdb, lease: ls, versions: versions, conn: conn, client: sundialv1.NewJobServiceClient(conn),
		dlq: sundialv1.NewDeadLetterServiceClient(conn), metrics: metrics, ctx: ctx}
}

func as(token string) grpc.CallOption { return grpc.PerRPCCredentials(auth.Bearer(token)) }

func (h *harness) count(sql string, args ...any) int {
	h.t.Helper()
	var n int
	if err := h.pool.QueryRow(h.ctx, sql, args...).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// jobWake waits for the next wake-up on listener (LISTENing on
// jobwake.Channel) that names a job of this test's schema, and returns its
// payload. The channel is the database's, not the schema's: the jobs of
// tests running at the same time in other packages wake it too.
func (h *harness) jobWake(ctx context.Context, listener *pgx.Conn) (string, error) {
	h.t.Helper()
	for {
		n, err := listener.WaitForNotification(ctx)
		if err != nil {
			return "", err
		}
		if h.count(`SELECT count(*) FROM jobs WHERE id::text = $1`, n.Payload) > 0 {
			return n.Payload, nil
		}
	}
}

func (h *harness) create(token string, job *sundialv1.Job) *sundialv1.Job {
	h.t.Helper()
	resp, err := h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: job}, as(token))
	if err != nil {
		h.t.Fatalf("CreateJob: %v", err)
	}
	return resp.GetJob()
}

// stageFake writes outbox rows for job as the prefetcher would, so tests can
// watch changes drop them.
func (h *harness) stageFake(job *sundialv1.Job, n int) {
	h.t.Helper()
	id := uuid.MustParse(job.GetId())
	for i := range n {
		slot := time.Now().Add(time.Duration(i+1) * time.Minute).Truncate(time.Second)
		f := &sundialv1.Firing{ExecutionId: firing.ExecutionID(id, slot).String(), JobId: job.GetId(), Attempt: 1}
		env, _ := firing.Encode(f)
		if _, err := outbox.Insert(h.ctx, h.pool, []outbox.Row{fakeRow(f, job.GetVersion(), slot, env)}); err != nil {
			h.t.Fatal(err)
		}
	}
}

// fakeRow is the outbox row of f as the tests stage it: at its slot,
// MEDIUM priority, published from the slot on.
func fakeRow(f *sundialv1.Firing, version int64, slot time.Time, env []byte) outbox.Row {
	return outbox.Row{
		ExecutionID: uuid.MustParse(f.GetExecutionId()), Attempt: 1, JobID: uuid.MustParse(f.GetJobId()), JobVersion: version,
		Priority: sundialv1.Priority_PRIORITY_MEDIUM, ScheduledAt: slot, FireAt: slot, PublishAt: slot, Envelope: env,
	}
}

func (h *harness) outboxRows(jobID string) int {
	return h.count(`SELECT count(*) FROM outbox WHERE job_id = $1`, jobID)
}

func everyMinute(name string) *sundialv1.Job {
	return &sundialv1.Job{
		Name:     name,
		Labels:   map[string]string{"team": "billing"},
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "* * * * *"}},
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{
			Url: "http://127.0.0.1:9/hook",
		}}},
		Payload: []byte(`{"hello":"world"}`),
	}
}

func TestIntegrationCreateAndGet(t *testing.T) {
	h := newHarness(t, nil)
	before := time.Now().Add(-time.Minute)
	job := h.create(tokenAcme, everyMinute("a"))
	if _, err := uuid.Parse(job.GetId()); err != nil || uuid.MustParse(job.GetId()).Version() != 7 {
		t.Fatalf("id %q is not a UUIDv7", job.GetId())
	}
	next := job.GetNextFireTime().AsTime()
	if next.Before(before) || next.Second() != 0 {
		t.Fatalf("next_fire_time = %v", next)
	}
	got, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: job.GetId()}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.GetJob(), job) {
		t.Fatalf("GetJob differs from CreateJob's answer:\n got %v\nwant %v", got.GetJob(), job)
	}

	// The columns beside spec: partition, priority, labels, next_fire_at.
	var (
		partition, priority int
		labels              map[string]string
		nextAt              time.Time
		spec                []byte
	)
	err = h.pool.QueryRow(h.ctx, `SELECT partition, priority, labels, next_fire_at, spec FROM jobs WHERE id = $1`, job.GetId()).
		Scan(&partition, &priority, &labels, &nextAt, &spec)
	if err != nil {
		t.Fatal(err)
	}
	if partition != firing.Partition(uuid.MustParse(job.GetId())) || priority != int(sundialv1.Priority_PRIORITY_MEDIUM) ||
		labels["team"] != "billing" || !nextAt.Equal(next) {
		t.Fatalf("columns: partition %d priority %d labels %v next %v", partition, priority, labels, nextAt)
	}
	stored := &sundialv1.Job{}
	if err := proto.Unmarshal(spec, stored); err != nil {
		t.Fatal(err)
	}
	if stored.GetId() != job.GetId() || stored.GetCreateTime() == nil || stored.GetNextFireTime() != nil || stored.GetRetry().GetMaxAttempts() != 1 {
		t.Fatalf("spec: %v", stored)
	}

	if _, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: uuid.NewString()}, as(tokenAcme)); status.Code(err) != codes.NotFound {
		t.Fatalf("missing job: %v", err)
	}
	if _, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: job.GetId()}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}
	if _, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: job.GetId()}, as("forged")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unknown token: %v", err)
	}
}

func TestIntegrationInvalidCreateWritesNothing(t *testing.T) {
	h := newHarness(t, nil)
	bad := everyMinute("bad")
	bad.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "0 0 32 * *"}
	bad.MaxJitter = durationpb.New(time.Hour)
	_, err := h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: bad, IdempotencyKey: "k1"}, as(tokenAcme))
	v := violations(t, err)
	for _, f := range []string{"schedule.cron", "max_jitter"} {
		if _, ok := v[f]; !ok {
			t.Errorf("no violation for %s: %v", f, v)
		}
	}
	// A one-off in the past passes validation but is refused by the
	// database clock, inside the transaction: still nothing written.
	past := everyMinute("past")
	past.Schedule.Spec = &sundialv1.Schedule_Once{Once: timestamppb.New(time.Now().Add(-time.Hour))}
	_, err = h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: past, IdempotencyKey: "k2"}, as(tokenAcme))
	if _, ok := violations(t, err)["schedule"]; !ok {
		t.Fatalf("past one-off: %v", err)
	}
	if n := h.count(`SELECT count(*) FROM jobs`); n != 0 {
		t.Fatalf("%d jobs written for bad input", n)
	}
	if n := h.count(`SELECT count(*) FROM outbox`); n != 0 {
		t.Fatalf("%d outbox rows written for bad input", n)
	}
}

func TestIntegrationIdempotentCreate(t *testing.T) {
	h := newHarness(t, nil)
	req := &sundialv1.CreateJobRequest{Job: everyMinute("idem"), IdempotencyKey: "deploy-42"}
	first, err := h.client.CreateJob(h.ctx, req, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	// A retry with the same job returns the first job (a different job
	// is refused: TestIntegrationIdempotencyKeyMismatch).
	second, err := h.client.CreateJob(h.ctx, proto.Clone(req).(*sundialv1.CreateJobRequest), as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(first.GetJob(), second.GetJob()) {
		t.Fatalf("retry returned another job:\n%v\n%v", first.GetJob(), second.GetJob())
	}
	// Concurrent retries race on the unique index; all get the same job.
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: everyMinute("race"), IdempotencyKey: "race"}, as(tokenAcme))
			errs[i] = err
			ids[i] = r.GetJob().GetId()
		}()
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("concurrent create %d: id %q err %v (first %q)", i, ids[i], errs[i], ids[0])
		}
	}
	// The key is per tenant: globex's same key makes its own job.
	other, err := h.client.CreateJob(h.ctx, req, as(tokenGlobex))
	if err != nil {
		t.Fatal(err)
	}
	if other.GetJob().GetId() == first.GetJob().GetId() || other.GetJob().GetTenant() != "globex" {
		t.Fatalf("tenants share an idempotency key: %v", other.GetJob())
	}
	if n := h.count(`SELECT count(*) FROM jobs`); n != 3 {
		t.Fatalf("%d jobs, want 3 (deploy-42 twice over two tenants, race once)", n)
	}
}

func TestIntegrationTenantIsolation(t *testing.T) {
	h := newHarness(t, nil)
	job := h.create(tokenAcme, everyMinute("private"))
	h.stageFake(job, 2)
	id := job.GetId()
	g := as(tokenGlobex)
	checks := map[string]error{}
	_, checks["GetJob"] = h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: id}, g)
	_, checks["UpdateJob"] = h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: id, Name: "x"}}, g)
	_, checks["PauseJob"] = h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id}, g)
	_, checks["ResumeJob"] = h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: id}, g)
	_, checks["DeleteJob"] = h.client.DeleteJob(h.ctx, &sundialv1.DeleteJobRequest{Id: id}, g)
	_, checks["TriggerJob"] = h.client.TriggerJob(h.ctx, &sundialv1.TriggerJobRequest{Id: id}, g)
	_, checks["ListExecutions"] = h.client.ListExecutions(h.ctx, &sundialv1.ListExecutionsRequest{JobId: id}, g)
	for rpc, err := range checks {
		if status.Code(err) != codes.NotFound {
			t.Errorf("%s on another tenant's job: %v, want NotFound", rpc, err)
		}
	}
	list, err := h.client.ListJobs(h.ctx, &sundialv1.ListJobsRequest{}, g)
	if err != nil || len(list.GetJobs()) != 0 {
		t.Fatalf("globex lists %v, %v", list.GetJobs(), err)
	}
	// Nothing the other tenant did changed the job or its staged firings.
	got, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: id}, as(tokenAcme))
	if err != nil || got.GetJob().GetVersion() != 1 || got.GetJob().GetName() != "private" {
		t.Fatalf("job changed by another tenant: %v %v", got.GetJob(), err)
	}
	if n := h.outboxRows(id); n != 2 {
		t.Fatalf("outbox rows = %d, want 2", n)
	}
}

func TestIntegrationChangesBumpVersionAndDropFirings(t *testing.T) {
	h := newHarness(t, nil)
	job := h.create(tokenAcme, everyMinute("lifecycle"))
	bystander := h.create(tokenAcme, everyMinute("bystander"))
	h.stageFake(bystander, 3)
	a := as(tokenAcme)
	id := job.GetId()

	step := func(name string, wantVersion int64, wantStatus sundialv1.JobStatus, do func() (*sundialv1.Job, error)) *sundialv1.Job {
		t.Helper()
		h.stageFake(&sundialv1.Job{Id: id, Version: wantVersion - 1}, 2)
		before := time.Now().Add(-time.Minute)
		j, err := do()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if j.GetVersion() != wantVersion || j.GetStatus() != wantStatus {
			t.Fatalf("%s: version %d status %v, want %d %v", name, j.GetVersion(), j.GetStatus(), wantVersion, wantStatus)
		}
		if j.GetUpdateTime().AsTime().Before(before) {
			t.Fatalf("%s: update_time not moved: %v", name, j.GetUpdateTime().AsTime())
		}
		if n := h.outboxRows(id); n != 0 {
			t.Fatalf("%s: %d unpublished firings left", name, n)
		}
		if n := h.outboxRows(bystander.GetId()); n != 3 {
			t.Fatalf("%s: another job's firings touched (%d left)", name, n)
		}
		if got := h.versions.of(id); len(got) == 0 || got[len(got)-1] != wantVersion {
			t.Fatalf("%s: published versions %v, want last %d", name, got, wantVersion)
		}
		redisVersion, err := h.rdb.Get(h.ctx, h.lease.Keys(id, "").Version).Int64()
		if err != nil || redisVersion != wantVersion {
			t.Fatalf("%s: Redis version %d (%v), want %d", name, redisVersion, err, wantVersion)
		}
		return j
	}

	updated := step("update", 2, sundialv1.JobStatus_JOB_STATUS_ACTIVE, func() (*sundialv1.Job, error) {
		r, err := h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{
			Job: &sundialv1.Job{Id: id, Name: "renamed", Schedule: &sundialv1.Schedule{
				Spec: &sundialv1.Schedule_Cron{Cron: "0 0 1 1 *"}, Timezone: "Asia/Tokyo",
			}, Priority: sundialv1.Priority_PRIORITY_HIGH},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name", "schedule", "priority"}},
		}, a)
		return r.GetJob(), err
	})
	if updated.GetName() != "renamed" || updated.GetSchedule().GetTimezone() != "Asia/Tokyo" || updated.GetLabels()["team"] != "billing" {
		t.Fatalf("update applied wrongly: %v", updated)
	}
	// New Year in Tokyo is 15:00 UTC on 31 December.
	if nt := updated.GetNextFireTime().AsTime(); nt.Month() != time.December || nt.Day() != 31 || nt.Hour() != 15 {
		t.Fatalf("next_fire_time after update = %v", nt)
	}
	var prio int
	if err := h.pool.QueryRow(h.ctx, `SELECT priority FROM jobs WHERE id = $1`, id).Scan(&prio); err != nil || prio != int(sundialv1.Priority_PRIORITY_HIGH) {
		t.Fatalf("priority column = %d, %v", prio, err)
	}

	paused := step("pause", 3, sundialv1.JobStatus_JOB_STATUS_PAUSED, func() (*sundialv1.Job, error) {
		r, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id}, a)
		return r.GetJob(), err
	})
	if paused.GetNextFireTime() != nil {
		t.Fatalf("paused job has next_fire_time %v", paused.GetNextFireTime())
	}
	// Pausing again changes nothing.
	again, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id}, a)
	if err != nil || again.GetJob().GetVersion() != 3 {
		t.Fatalf("second pause: %v %v", again.GetJob(), err)
	}
	// A paused job can be edited; it stays paused.
	r, err := h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{
		Job:        &sundialv1.Job{Id: id, Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(time.Hour)}}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"schedule"}},
	}, a)
	if err != nil || r.GetJob().GetStatus() != sundialv1.JobStatus_JOB_STATUS_PAUSED || r.GetJob().GetVersion() != 4 {
		t.Fatalf("update of paused job: %v %v", r.GetJob(), err)
	}

	resumed := step("resume", 5, sundialv1.JobStatus_JOB_STATUS_ACTIVE, func() (*sundialv1.Job, error) {
		r, err := h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: id}, a)
		return r.GetJob(), err
	})
	// From now on: the interval anchored at creation (to the second), next slot after now,
	// no catch-up of the paused stretch.
	created := job.GetCreateTime().AsTime()
	nt := resumed.GetNextFireTime().AsTime()
	if !nt.After(time.Now().Add(-time.Minute)) || nt.Sub(created.Truncate(time.Second))%time.Hour != 0 {
		t.Fatalf("resumed next_fire_time = %v (created %v)", nt, created)
	}

	deleted := step("delete", 6, sundialv1.JobStatus_JOB_STATUS_DELETED, func() (*sundialv1.Job, error) {
		r, err := h.client.DeleteJob(h.ctx, &sundialv1.DeleteJobRequest{Id: id}, a)
		return r.GetJob(), err
	})
	if deleted.GetNextFireTime() != nil {
		t.Fatal("deleted job has a next_fire_time")
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE id = $1 AND deleted_at IS NOT NULL AND status = 'deleted'`, id); n != 1 {
		t.Fatal("delete is not soft with deleted_at")
	}
	// Deleted: still readable, not listed, not changeable.
	if g, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: id}, a); err != nil || g.GetJob().GetStatus() != sundialv1.JobStatus_JOB_STATUS_DELETED {
		t.Fatalf("GetJob of deleted job: %v %v", g, err)
	}
	if d, err := h.client.DeleteJob(h.ctx, &sundialv1.DeleteJobRequest{Id: id}, a); err != nil || d.GetJob().GetVersion() != 6 {
		t.Fatalf("second delete: %v %v", d, err)
	}
	for name, err := range map[string]error{
		"update": func() error {
			_, err := h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: id, Name: "x"}}, a)
			return err
		}(),
		"pause":  func() error { _, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: id}, a); return err }(),
		"resume": func() error { _, err := h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: id}, a); return err }(),
		"trigger": func() error {
			_, err := h.client.TriggerJob(h.ctx, &sundialv1.TriggerJobRequest{Id: id}, a)
			return err
		}(),
	} {
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("%s of deleted job: %v, want FailedPrecondition", name, err)
		}
	}
	if n := h.count(`SELECT version FROM jobs WHERE id = $1`, id); n != 6 {
		t.Fatalf("refused changes moved the version to %d", n)
	}
}

func TestIntegrationInvalidUpdateWritesNothing(t *testing.T) {
	h := newHarness(t, nil)
	job := h.create(tokenAcme, everyMinute("stable"))
	h.stageFake(job, 2)
	_, err := h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{
		Job:        &sundialv1.Job{Id: job.GetId(), Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "ftp://x"}}}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"target"}},
	}, as(tokenAcme))
	if _, ok := violations(t, err)["target.http.url"]; !ok {
		t.Fatalf("bad update: %v", err)
	}
	got, _ := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: job.GetId()}, as(tokenAcme))
	if !proto.Equal(got.GetJob(), job) {
		t.Fatalf("job changed by a refused update:\n%v\n%v", got.GetJob(), job)
	}
	if n := h.outboxRows(job.GetId()); n != 2 {
		t.Fatalf("refused update dropped firings: %d left", n)
	}
	if len(h.versions.of(job.GetId())) != 0 {
		t.Fatal("refused update published a version")
	}
}

func TestIntegrationTrigger(t *testing.T) {
	h := newHarness(t, nil)
	job := h.create(tokenAcme, everyMinute("manual"))

	// Listen before triggering; the notification arrives at commit.
	cfg := h.pool.Config().ConnConfig.Copy()
	listener, err := pgx.ConnectConfig(h.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(h.ctx, "LISTEN "+outbox.Channel); err != nil {
		t.Fatal(err)
	}

	resp, err := h.client.TriggerJob(h.ctx, &sundialv1.TriggerJobRequest{Id: job.GetId()}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(ctx)
	if err != nil || n.Channel != outbox.Channel {
		t.Fatalf("no notification: %v %v", n, err)
	}

	var (
		execID                        string
		attempt                       int
		version                       int64
		scheduled, fire, publish, now time.Time
		env                           []byte
	)
	err = h.pool.QueryRow(h.ctx, `SELECT execution_id::text, attempt, job_version, scheduled_at, fire_at, publish_at, envelope, now() FROM outbox WHERE job_id = $1`, job.GetId()).
		Scan(&execID, &attempt, &version, &scheduled, &fire, &publish, &env, &now)
	if err != nil {
		t.Fatal(err)
	}
	want := firing.TriggerExecutionID(uuid.MustParse(job.GetId()), scheduled).String()
	if execID != resp.GetExecutionId() || execID != want || attempt != 1 || version != 1 {
		t.Fatalf("outbox row: exec %s (resp %s, want %s) attempt %d version %d", execID, resp.GetExecutionId(), want, attempt, version)
	}
	if !fire.Equal(scheduled) || !publish.Equal(scheduled) || scheduled.After(now) || !resp.GetScheduledTime().AsTime().Equal(scheduled) {
		t.Fatalf("instants: scheduled %v fire %v publish %v now %v", scheduled, fire, publish, now)
	}
	f, err := firing.Decode(env)
	if err != nil {
		t.Fatal(err)
	}
	if f.GetOrigin() != sundialv1.FiringOrigin_FIRING_ORIGIN_TRIGGER || f.GetTenant() != "acme" || f.GetJobVersion() != 1 ||
		f.GetTarget().GetHttp().GetMethod() != "POST" || string(f.GetPayload()) != `{"hello":"world"}` || f.GetStagedTime() == nil || f.GetCatchUp() {
		t.Fatalf("envelope: %v", f)
	}

	// A paused job can still be fired by hand.
	if _, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: job.GetId()}, as(tokenAcme)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.TriggerJob(h.ctx, &sundialv1.TriggerJobRequest{Id: job.GetId()}, as(tokenAcme)); err != nil {
		t.Fatalf("trigger of paused job: %v", err)
	}
	if n := h.outboxRows(job.GetId()); n != 1 {
		t.Fatalf("outbox rows after pause+trigger = %d, want 1", n)
	}
}

func TestIntegrationListPaging(t *testing.T) {
	h := newHarness(t, nil)
	var want []string
	for i := range 7 {
		j := everyMinute("job-" + strconv.Itoa(i))
		if i%2 == 1 {
			j.Labels = map[string]string{"team": "ops", "tier": "gold"}
		}
		want = append(want, h.create(tokenAcme, j).GetId())
	}
	h.create(tokenGlobex, everyMinute("not mine"))

	var got []string
	tok := ""
	pages := 0
	for {
		resp, err := h.client.ListJobs(h.ctx, &sundialv1.ListJobsRequest{PageSize: 3, PageToken: tok}, as(tokenAcme))
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, j := range resp.GetJobs() {
			got = append(got, j.GetId())
		}
		if tok = resp.GetNextPageToken(); tok == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if !slices.Equal(got, want) || pages != 3 {
		t.Fatalf("paged %v in %d pages, want %v in 3", got, pages, want)
	}

	// Label filter, with paging carrying the filter.
	resp, err := h.client.ListJobs(h.ctx, &sundialv1.ListJobsRequest{PageSize: 2, Labels: map[string]string{"team": "ops"}}, as(tokenAcme))
	if err != nil || len(resp.GetJobs()) != 2 || resp.GetNextPageToken() == "" {
		t.Fatalf("label page 1: %v %v", resp, err)
	}
	if _, err := h.client.ListJobs(h.ctx, &sundialv1.ListJobsRequest{PageSize: 2, PageToken: resp.GetNextPageToken()}, as(tokenAcme)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("token reused without its filter: %v", err)
	}
	resp2, err := h.client.ListJobs(h.ctx, &sundialv1.ListJobsRequest{PageSize: 2, Labels: map[string]string{"team": "ops"}, PageToken: resp.GetNextPageToken()}, as(tokenAcme))
	if err != nil || len(resp2.GetJobs()) != 1 || resp2.GetNextPageToken() != "" {
		t.Fatalf("label page 2: %v %v", resp2, err)
	}

	// Status filter; deleted jobs only when asked for.
	if _, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: want[0]}, as(tokenAcme)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.DeleteJob(h.ctx, &sundialv1.DeleteJobRequest{Id: want[1]}, as(tokenAcme)); err != nil {
		t.Fatal(err)
	}
	count := func(st sundialv1.JobStatus) int {
		r, err := h.client.ListJobs(h.ctx, &sundialv1.ListJobsRequest{Status: st}, as(tokenAcme))
		if err != nil {
			t.Fatal(err)
		}
		return len(r.GetJobs())
	}
	if a, p, d, all := count(sundialv1.JobStatus_JOB_STATUS_ACTIVE), count(sundialv1.JobStatus_JOB_STATUS_PAUSED),
		count(sundialv1.JobStatus_JOB_STATUS_DELETED), count(sundialv1.JobStatus_JOB_STATUS_UNSPECIFIED); a != 5 || p != 1 || d != 1 || all != 6 {
		t.Fatalf("active %d paused %d deleted %d all-but-deleted %d", a, p, d, all)
	}
}

func TestIntegrationExecutionsFromLedger(t *testing.T) {
	ctx := context.Background()
	keyspace := testinfra.CassandraKeyspace(t)
	session, err := ledger.Connect(ledger.ConnectConfig{Hosts: testinfra.CassandraHosts(t), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("cassandra: %v", err)
	}
	t.Cleanup(session.Close)
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := ledger.Migrate(mctx, session, keyspace, ""); err != nil {
		t.Fatal(err)
	}

	h := newHarness(t, ledger.NewReader(session, keyspace))
	job := h.create(tokenAcme, everyMinute("history"))
	w := ledger.NewWriter(session, keyspace)
	slot := time.Now().Add(-time.Hour).Truncate(time.Minute).UTC()
	var execIDs []string
	for i := range 3 {
		s := slot.Add(time.Duration(i) * time.Minute)
		execID := firing.ExecutionID(uuid.MustParse(job.GetId()), s).String()
		execIDs = append(execIDs, execID)
		err := w.Record(ctx, &sundialv1.ExecutionAttempt{
			ExecutionId: execID, JobId: job.GetId(), Tenant: "acme", Attempt: 1, FenceToken: int64(i + 1),
			Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, ScheduledTime: timestamppb.New(s),
			FireTime: timestamppb.New(s), StartedTime: timestamppb.New(s), FinishedTime: timestamppb.New(s.Add(time.Second)),
			HttpStatus: 200, JobVersion: 1, Worker: "w1",
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	resp, err := h.client.ListExecutions(h.ctx, &sundialv1.ListExecutionsRequest{JobId: job.GetId(), PageSize: 10}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetAttempts()) != 3 || resp.GetAttempts()[0].GetExecutionId() != execIDs[2] {
		t.Fatalf("ListExecutions = %v", resp.GetAttempts())
	}
	got, err := h.client.GetExecution(h.ctx, &sundialv1.GetExecutionRequest{ExecutionId: execIDs[0]}, as(tokenAcme))
	if err != nil || len(got.GetAttempts()) != 1 || got.GetAttempts()[0].GetHttpStatus() != 200 {
		t.Fatalf("GetExecution = %v, %v", got, err)
	}
	if _, err := h.client.GetExecution(h.ctx, &sundialv1.GetExecutionRequest{ExecutionId: execIDs[0]}, as(tokenGlobex)); status.Code(err) != codes.NotFound {
		t.Fatalf("another tenant's execution: %v", err)
	}
	if _, err := h.client.GetExecution(h.ctx, &sundialv1.GetExecutionRequest{ExecutionId: uuid.NewString()}, as(tokenAcme)); status.Code(err) != codes.NotFound {
		t.Fatalf("missing execution: %v", err)
	}
	if _, err := h.client.ListExecutions(h.ctx, &sundialv1.ListExecutionsRequest{JobId: job.GetId(), PageToken: "bogus"}, as(tokenAcme)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bogus page token: %v", err)
	}
}

func TestIntegrationHistoryWithoutLedgerIsUnavailable(t *testing.T) {
	h := newHarness(t, nil)
	job := h.create(tokenAcme, everyMinute("nohistory"))
	_, err := h.client.ListExecutions(h.ctx, &sundialv1.ListExecutionsRequest{JobId: job.GetId()}, as(tokenAcme))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("ListExecutions without a ledger: %v", err)
	}
}

func TestIntegrationNotifiesPrefetcher(t *testing.T) {
	h := newHarness(t, nil)
	listener, err := pgx.ConnectConfig(h.ctx, h.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(h.ctx, "LISTEN "+jobwake.Channel); err != nil {
		t.Fatal(err)
	}
	wait := func(what, wantID string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
		defer cancel()
		got, err := h.jobWake(ctx, listener)
		if err != nil || got != wantID {
			t.Fatalf("%s: notification %q, %v; want payload %s", what, got, err, wantID)
		}
	}
	job := h.create(tokenAcme, everyMinute("wake"))
	wait("create", job.GetId())
	if _, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: job.GetId()}, as(tokenAcme)); err != nil {
		t.Fatal(err)
	}
	// Pausing schedules nothing; resuming wakes the prefetcher again.
	if _, err := h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: job.GetId()}, as(tokenAcme)); err != nil {
		t.Fatal(err)
	}
	wait("resume", job.GetId())
}
