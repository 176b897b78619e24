// Package server is the api's gRPC surface: the JobService handlers, the
// interceptors around them (metrics, then authentication) and the gRPC
// server as a lifecycle.Service.
//
// Handlers validate everything they can before touching Postgres, so bad
// input is refused without a transaction; what needs the stored job (an
// update's merged result) is validated inside the transaction and aborts it.
// Either way a refused request writes nothing.
package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/domain/calendar"
	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// Store is the job storage the handlers use; *store.Store implements it.
type Store interface {
	Create(ctx context.Context, tenant string, opts store.CreateOptions, build store.BuildFunc) (*sundialv1.Job, bool, error)
	CreateMany(ctx context.Context, tenant string, items []store.CreateItem, opts store.CreateManyOptions, build store.ManyBuildFunc) ([]store.Created, error)
	Get(ctx context.Context, tenant, id string) (*sundialv1.Job, error)
	List(ctx context.Context, tenant string, q store.ListQuery) ([]*sundialv1.Job, error)
	ListBounded(ctx context.Context, tenant string, q store.ListQuery, scan int) ([]*sundialv1.Job, string, error)
	Mutate(ctx context.Context, tenant, id string, change store.Change, fn store.MutateFunc) (store.Mutated, error)
	MutateEach(ctx context.Context, tenant string, ids []string, change store.Change, fn store.MutateFunc) ([]store.Mutation, error)
	Stage(ctx context.Context, tenant, id string, dryRun bool, fn store.StageFunc) (store.StageResult, error)
	ListAudit(ctx context.Context, tenant string, q store.AuditQuery) ([]store.AuditEntry, error)
	AppendAudit(ctx context.Context, tenant, jobID string, version int64, a store.Audit) error
	Count(ctx context.Context, tenant string, q store.ListQuery, upTo int) (int64, error)
}

// ExecutionReader reads execution history from the ledger.
type ExecutionReader interface {
	// ListByJob returns a page of the job's attempts, newest first, and the
	// token of the next page ("" at the end).
	ListByJob(ctx context.Context, jobID string, pageSize int, pageToken string) ([]*sundialv1.ExecutionAttempt, string, error)
	// GetExecution returns every attempt of one execution.
	GetExecution(ctx context.Context, executionID string) ([]*sundialv1.ExecutionAttempt, error)
}

// VersionPublisher tells workers a job's current version, so they skip
// firings staged under older ones. Implementations only ever raise it.
type VersionPublisher interface {
	PublishVersion(ctx context.Context, jobID string, version int64) error
}

// Config is what a JobService needs.
type Config struct {
	Store Store
	// Executions serves ListExecutions and GetExecution; nil answers them
	// Unavailable.
	Executions ExecutionReader
	// Versions is told every new version after its change commits.
	Versions VersionPublisher
	// Cancels records CancelExecution's requests where the workers look
	// (the workers' Redis, like Versions); nil answers it Unavailable.
	Cancels Canceller
	// Clock is only for PreviewSchedule's default start; scheduling
	// decisions use the database clock.
	Clock   clock.Clock
	Logger  *slog.Logger
	Metrics *Metrics
	// NewID makes job ids; UUIDv7 by default.
	NewID func() (uuid.UUID, error)
	// PublishTimeout bounds publishing a version after a change; 2 s by
	// default.
	PublishTimeout time.Duration
	// Quotas are the per-tenant limits; nil limits nothing.
	Quotas *quotas.Tenants
	// ReleaseLead is how long before its fire instant a paced firing (a
	// backfill's or a re-drive's) becomes publishable; DefaultReleaseLead
	// by default.
	ReleaseLead time.Duration
	// Tracer gives every firing the api stages its trace context (see
	// pkg/process/tracing); nil: tracing off.
	Tracer trace.Tracer
	// Topics refuses Kafka targets whose topic does not exist (see
	// checkTopic); nil checks nothing.
	Topics TopicChecker
	// Secrets is what target secrets each tenant has: a job referencing
	// one its tenant lacks is refused (see checkSecrets); nil refuses every
	// reference.
	Secrets SecretCatalog
	// Calendars resolves the business calendar a schedule names (see
	// calendars.go); nil refuses every schedule that names one.
	Calendars CalendarReader
	// IdempotencyKeyTTL is how long a CreateJob idempotency key lasts from
	// the create that used it; DefaultIdempotencyKeyTTL by default.
	IdempotencyKeyTTL time.Duration
}

// DefaultIdempotencyKeyTTL is how long an idempotency key lasts unless
// configured: a day covers a client retrying through an outage, a
// redeployed pipeline re-running its creates and a human re-running
// yesterday's script by mistake, and it is Stripe's choice too, so it is
// what users of such keys already expect.
const DefaultIdempotencyKeyTTL = 24 * time.Hour

// TopicChecker says whether a Kafka topic exists on the cluster the
// workers produce job records to.
type TopicChecker interface {
	TopicExists(ctx context.Context, topic string) (bool, error)
}

// topicCheckTimeout bounds the Kafka metadata call of a create or update.
const topicCheckTimeout = 3 * time.Second

// JobService implements sundial.v1.JobService.
type JobService struct {
	sundialv1.UnimplementedJobServiceServer

	store          Store
	executions     ExecutionReader
	versions       VersionPublisher
	cancels        Canceller
	clock          clock.Clock
	logger         *slog.Logger
	metrics        *Metrics
	newID          func() (uuid.UUID, error)
	publishTimeout time.Duration
	quotas         *quotas.Tenants
	pacer          pacer
	tracer         trace.Tracer
	topics         TopicChecker
	secrets        SecretCatalog
	calendars      CalendarReader
	idemTTL        time.Duration
}

// NewJobService checks cfg and returns the service.
func NewJobService(cfg Config) (*JobService, error) {
	if cfg.Store == nil {
		return nil, errors.New("server: Store is required")
	}
	if cfg.Versions == nil {
		return nil, errors.New("server: Versions is required")
	}
	s := &JobService{
		store:          cfg.Store,
		executions:     cfg.Executions,
		versions:       cfg.Versions,
		cancels:        cfg.Cancels,
		clock:          cfg.Clock,
		logger:         cfg.Logger,
		metrics:        cfg.Metrics,
		newID:          cfg.NewID,
		publishTimeout: cfg.PublishTimeout,
		quotas:         cfg.Quotas,
		pacer:          pacer{lead: cfg.ReleaseLead},
		tracer:         cfg.Tracer,
		topics:         cfg.Topics,
		secrets:        cfg.Secrets,
		calendars:      cfg.Calendars,
		idemTTL:        cfg.IdempotencyKeyTTL,
	}
	if s.clock == nil {
		s.clock = clock.Real{}
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(nil)
	}
	if s.newID == nil {
		s.newID = uuid.NewV7
	}
	if s.publishTimeout <= 0 {
		s.publishTimeout = 2 * time.Second
	}
	if s.pacer.lead <= 0 {
		s.pacer.lead = DefaultReleaseLead
	}
	if s.idemTTL <= 0 {
		s.idemTTL = DefaultIdempotencyKeyTTL
	}
	return s, nil
}

// checkTopic refuses a Kafka target whose topic the cluster says does not
// exist: workers never create job topics (a typo must not become one), so
// every firing of such a job would be dead-lettered with
// UNKNOWN_TOPIC_OR_PARTITION. A cluster that cannot be asked refuses
// nothing — the api keeps accepting jobs through a Kafka outage — and a
// topic deleted after the check still dead-letters (docs/semantics.md).
func (s *JobService) checkTopic(ctx context.Context, job *sundialv1.Job) error {
	topic := job.GetTarget().GetKafka().GetTopic()
	if s.topics == nil || topic == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, topicCheckTimeout)
	defer cancel()
	exists, err := s.topics.TopicExists(ctx, topic)
	if err != nil {
		s.logger.Warn("kafka target topic not checked", "topic", topic, "err", err)
		return nil
	}
	if !exists {
		return invalidf("target.kafka.topic", "topic %q does not exist on the Kafka cluster; create it first (firings to a missing topic are dead-lettered)", topic)
	}
	return nil
}

// actorOf is who the audit trail says made the call's changes. Without the
// auth interceptor's actor (tests that build contexts by hand) it is the
// tenant alone.
func actorOf(ctx context.Context, tenant string) string {
	if a, ok := auth.ActorFrom(ctx); ok {
		return a
	}
	return tenant + "/unknown"
}

func tenantOf(ctx context.Context) (string, error) {
	t, ok := auth.TenantFrom(ctx)
	if !ok {
		// Only reachable when the server was built without the auth
		// interceptor; refuse rather than serve a tenant-less call.
		return "", status.Error(codes.Unauthenticated, "no tenant for this call")
	}
	return t, nil
}

// jobID checks an id field is a UUID and returns it canonical.
func jobID(field, id string) (string, error) {
	if id == "" {
		return "", invalidf(field, "is required")
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return "", invalidf(field, "must be a UUID, got %q", id)
	}
	return u.String(), nil
}

const maxIdempotencyKey = 256

// expectedVersion checks a change's expected_version: 0 (any version) or a
// version a job can have. Versions start at 1.
func expectedVersion(v int64) error {
	if v < 0 {
		return invalidf("expected_version", "must not be negative, got %d (0: any version)", v)
	}
	return nil
}

// outputOnlyCleared returns a copy of job without the fields the server
// owns, so a client echoing a fetched job back cannot set them.
func outputOnlyCleared(job *sundialv1.Job) *sundialv1.Job {
	j := proto.Clone(job).(*sundialv1.Job)
	j.Id, j.Tenant, j.Status, j.Version = "", "", sundialv1.JobStatus_JOB_STATUS_UNSPECIFIED, 0
	j.NextFireTime, j.CreateTime, j.UpdateTime = nil, nil, nil
	j.RemainingRuns = 0
	return j
}

// noInstantAfter is the refusal for a schedule that would never fire again.
func noInstantAfter(now time.Time) error {
	return invalidf("schedule", "has no instant after now (%s by the database clock); check once, end_time, the expression and the exclusions", now.Format(time.RFC3339))
}

// buildSchedule is jobspec.Schedule inside a store transaction. Validate
// accepted the job, so an error is a bug, except for a recurrence rule
// without start_time: its DTSTART is the creation time, known only now, and
// a rule that never fires from it is the caller's mistake (InvalidArgument,
// and the transaction writes nothing).
func buildSchedule(job *sundialv1.Job, created time.Time) (schedule.Schedule, error) {
	sch, err := jobspec.Schedule(job, created)
	var jerr *jobspec.Error
	if errors.As(err, &jerr) {
		return nil, rejectErr(fromSpec(err))
	}
	if err != nil {
		return nil, fmt.Errorf("server: build schedule: %w", err)
	}
	return sch, nil
}

// requestHash identifies a create's job for its idempotency key: SHA-256
// of the job as the client sent it with the server-owned fields cleared
// (a retry that copies them in is still the same request),
// deterministically encoded. It is taken before Normalize, so a later release filling
// defaults differently does not turn a retry into a mismatch; the flip side
// is that two spellings of one job (an explicit default and an omitted
// one) are different requests.
func requestHash(job *sundialv1.Job) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("server: encode job for its idempotency key: %w", err)
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// CreateJob validates, fills defaults and stores a job, computing its first
// slot from the database clock. A repeated idempotency key returns the job
// the first call created if the job sent is the same, and is refused
// (AlreadyExists, naming idempotency_key) if not; keys last idemTTL.
func (s *JobService) CreateJob(ctx context.Context, req *sundialv1.CreateJobRequest) (*sundialv1.CreateJobResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	p, err := s.prepareCreate(ctx, tenant, req, s.checkTopic)
	if err != nil {
		return nil, s.statusOf(ctx, "CreateJob", err)
	}
	job := p.job
	limits := s.quotas.For(tenant)
	opts := store.CreateOptions{
		IdempotencyKey: p.key,
		RequestHash:    p.hash,
		IdempotencyTTL: s.idemTTL,
		Actor:          actorOf(ctx, tenant),
		Usage:          createUsage(limits),
	}
	if ctx, err = s.preloadCalendars(ctx, tenant, job.GetSchedule().GetCalendar()); err != nil {
		return nil, s.statusOf(ctx, "CreateJob", err)
	}
	created, existed, err := s.store.Create(ctx, tenant, opts, func(now time.Time, usage store.Usage) (*sundialv1.Job, error) {
		if err := limits.CheckCreate(tenant, usage.Jobs, usage.CreatedRecently); err != nil {
			return nil, err
		}
		return s.firstSlot(ctx, tenant, limits, job, now, nil)
	})
	if err != nil {
		return nil, s.statusOf(ctx, "CreateJob", err)
	}
	if existed {
		s.metrics.idempotentReplays.Inc()
	} else {
		s.logger.InfoContext(ctx, "job created", "tenant", tenant, "job", created.GetId(), "next_fire_time", created.GetNextFireTime().AsTime())
	}
	return &sundialv1.CreateJobResponse{Job: created}, nil
}

// preparedCreate is a create's job checked, normalized and given its id,
// status and version, with the idempotency key and the request's hash.
type preparedCreate struct {
	job  *sundialv1.Job
	key  string
	hash []byte
}

// prepareCreate is everything a create checks and fills before its
// transaction: the key, the job's fields, its secrets and (with topic) its
// Kafka topic; an error is InvalidArgument naming the field, or what
// statusOf maps.
func (s *JobService) prepareCreate(ctx context.Context, tenant string, req *sundialv1.CreateJobRequest, topic func(context.Context, *sundialv1.Job) error) (preparedCreate, error) {
	if req.GetJob() == nil {
		return preparedCreate{}, invalidf("job", "is required")
	}
	key := req.GetIdempotencyKey()
	if len(key) > maxIdempotencyKey || !utf8.ValidString(key) || strings.IndexFunc(key, unicode.IsControl) >= 0 {
		return preparedCreate{}, invalidf("idempotency_key", "must be at most %d bytes of UTF-8 without control characters", maxIdempotencyKey)
	}
	job := outputOnlyCleared(req.GetJob())
	if err := jobspec.Validate(job); err != nil {
		return preparedCreate{}, fromSpec(err)
	}
	var hash []byte
	if key != "" {
		hashed := job
		if req.GetPaused() {
			// A paused create is another request than an active one of the
			// same job; status is cleared otherwise, so active creates
			// hash as they always did.
			hashed = proto.Clone(job).(*sundialv1.Job)
			hashed.Status = sundialv1.JobStatus_JOB_STATUS_PAUSED
		}
		var err error
		if hash, err = requestHash(hashed); err != nil {
			return preparedCreate{}, err
		}
	}
	if err := s.checkSecrets(tenant, job); err != nil {
		return preparedCreate{}, err
	}
	if err := topic(ctx, job); err != nil {
		return preparedCreate{}, err
	}
	jobspec.Normalize(job)
	id, err := s.newID()
	if err != nil {
		return preparedCreate{}, err
	}
	job.Id, job.Tenant = id.String(), tenant
	job.Status, job.Version = sundialv1.JobStatus_JOB_STATUS_ACTIVE, 1
	if req.GetPaused() {
		job.Status = sundialv1.JobStatus_JOB_STATUS_PAUSED
	}
	job.RemainingRuns = job.GetMaxRuns() // nothing staged yet
	return preparedCreate{job: job, key: key, hash: hash}, nil
}

// createUsage is what a create counts for the tenant's quotas.
func createUsage(limits quotas.Limits) store.UsageQuery {
	return store.UsageQuery{
		JobsUpTo:      limits.MaxJobs,
		CreatedWithin: quotas.CreateRateWindow,
		CreatedUpTo:   limits.CreatesPerMinute,
	}
}

// firstSlot gives a new job its first slot after now (by the database
// clock, inside the create's transaction), refusing a schedule that never
// fires again or fires closer than the tenant's min_interval. gaps, when
// not nil, remembers the min_interval verdict by schedule for the rest of
// one transaction (one now): two identical schedule messages make the same
// instants from the same now, and the check walks 1,001 of them, which is
// most of a create's CPU.
func (s *JobService) firstSlot(ctx context.Context, tenant string, limits quotas.Limits, job *sundialv1.Job, now time.Time, gaps map[string]error) (*sundialv1.Job, error) {
	sch, err := s.scheduleOf(ctx, tenant, job, now)
	if err != nil {
		return nil, err
	}
	next := sch.Next(now)
	if next.IsZero() {
		return nil, rejectErr(noInstantAfter(now))
	}
	if jobspec.Hashed(job.GetSchedule()) {
		gaps = nil // its instants are the job's own (H hashes its id)
	}
	if err := checkIntervalOnce(limits, tenant, job.GetSchedule(), sch, now, gaps); err != nil {
		return nil, err
	}
	job.NextFireTime = timestamppb.New(next)
	if job.GetStatus() == sundialv1.JobStatus_JOB_STATUS_PAUSED {
		job.NextFireTime = nil // as PauseJob leaves it; ResumeJob sets it
	}
	return job, nil
}

// checkIntervalOnce is limits.CheckInterval, looked up in gaps (by the
// schedule message's deterministic encoding) before it is computed.
func checkIntervalOnce(limits quotas.Limits, tenant string, spec *sundialv1.Schedule, sch schedule.Schedule, now time.Time, gaps map[string]error) error {
	if gaps == nil || limits.MinInterval <= 0 {
		return limits.CheckInterval(tenant, sch, now)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(spec)
	if err != nil {
		return limits.CheckInterval(tenant, sch, now)
	}
	if err, done := gaps[string(b)]; done {
		return err
	}
	err = limits.CheckInterval(tenant, sch, now)
	gaps[string(b)] = err
	return err
}

// GetJob returns one of the tenant's jobs, deleted ones included.
func (s *JobService) GetJob(ctx context.Context, req *sundialv1.GetJobRequest) (*sundialv1.GetJobResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	id, err := jobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	job, err := s.store.Get(ctx, tenant, id)
	if err != nil {
		return nil, s.statusOf(ctx, "GetJob", err)
	}
	return &sundialv1.GetJobResponse{Job: job}, nil
}

// ShortNameScan is how many jobs (those matching the other filters) one
// ListJobs page examines for a name_contains the trigram index cannot
// serve (fewer than three letters or digits in a row), or filtered by
// the MEDIUM priority (the default, which jobs_tenant_priority leaves
// out): such a page may hold fewer than page_size jobs, or none, and
// still have a next page. Measured at 1,000,000 jobs in docs/console.md.
const ShortNameScan = 10_000

// ListJobs pages through the tenant's jobs in creation order.
func (s *JobService) ListJobs(ctx context.Context, req *sundialv1.ListJobsRequest) (*sundialv1.ListJobsResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	q, filter, err := jobFilter{status: req.GetStatus(), labels: req.GetLabels(), nameContains: req.GetNameContains(), priority: req.GetPriority(),
		nextFireAfter: req.GetNextFireAfter(), nextFireBefore: req.GetNextFireBefore()}.query()
	if err != nil {
		return nil, err
	}
	q.Limit = size + 1
	if tok := req.GetPageToken(); tok != "" {
		c, err := decodeCursor(tok, filter)
		if err != nil {
			return nil, err
		}
		q.After = c.After
	}
	var (
		jobs   []*sundialv1.Job
		resume string
	)
	if q.Priority == sundialv1.Priority_PRIORITY_MEDIUM || q.NameContains != "" && !store.NameIndexable(q.NameContains) {
		// No trigram to look up, or the default priority, which no index
		// holds (it is usually most jobs, and fills a page at once; where
		// it is rare, the bound keeps a page from reading every job):
		// examine a bounded window of the tenant's jobs a page.
		jobs, resume, err = s.store.ListBounded(ctx, tenant, q, ShortNameScan)
	} else {
		jobs, err = s.store.List(ctx, tenant, q)
	}
	if err != nil {
		return nil, s.statusOf(ctx, "ListJobs", err)
	}
	resp := &sundialv1.ListJobsResponse{Jobs: jobs}
	switch {
	case len(jobs) > size:
		resp.Jobs = jobs[:size]
		resp.NextPageToken = encodeCursor(listCursor{After: jobs[size-1].GetId(), Filter: filter})
	case resume != "":
		resp.NextPageToken = encodeCursor(listCursor{After: resume, Filter: filter})
	}
	return resp, nil
}

// UpdateJob changes the fields the mask names, bumps the version, drops the
// job's unpublished firings and recomputes its next slot from now. With
// expected_version set, a job at another version is refused
// (FailedPrecondition naming the current one) and nothing is written.
func (s *JobService) UpdateJob(ctx context.Context, req *sundialv1.UpdateJobRequest) (*sundialv1.UpdateJobResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetJob() == nil {
		return nil, invalidf("job", "is required")
	}
	id, err := jobID("job.id", req.GetJob().GetId())
	if err != nil {
		return nil, err
	}
	if err := expectedVersion(req.GetExpectedVersion()); err != nil {
		return nil, err
	}
	src := proto.Clone(req.GetJob()).(*sundialv1.Job)
	paths, err := resolveMask(src, req.GetUpdateMask())
	if err != nil {
		return nil, err
	}
	touchesTarget := slices.ContainsFunc(paths, func(p string) bool { return p == "target" || strings.HasPrefix(p, "target.") })
	if touchesTarget {
		// Before the transaction: no Kafka round trip while it holds the row.
		if err := s.checkTopic(ctx, src); err != nil {
			return nil, err
		}
	}
	change := store.Change{
		Audit: store.Audit{Actor: actorOf(ctx, tenant), Action: store.ActionUpdate, Detail: map[string]any{"paths": paths}},
		DropReason: func(next *sundialv1.Job) string {
			return fmt.Sprintf("job updated to version %d", next.GetVersion())
		},
		ExpectedVersion: req.GetExpectedVersion(),
	}
	limits := s.quotas.For(tenant)
	if ctx, err = s.preloadJobCalendars(ctx, id, src); err != nil {
		return nil, s.statusOf(ctx, "UpdateJob", err)
	}
	mut, err := s.store.Mutate(ctx, tenant, id, change, func(now time.Time, cur *sundialv1.Job) (*sundialv1.Job, error) {
		if cur.GetStatus() == sundialv1.JobStatus_JOB_STATUS_DELETED {
			return nil, reject(codes.FailedPrecondition, "job is deleted")
		}
		next := proto.Clone(cur).(*sundialv1.Job)
		applyMask(next, src, paths)
		if err := jobspec.Validate(next); err != nil {
			return nil, rejectErr(fromSpec(err))
		}
		if touchesTarget {
			// A local stat per reference: cheap enough inside the
			// transaction, and it judges the headers the job ends up with.
			if err := s.checkSecrets(tenant, next); err != nil {
				return nil, rejectErr(err)
			}
		}
		jobspec.Normalize(next)
		scheduleChanged := touchesSchedule(paths)
		if scheduleChanged {
			sch, err := s.scheduleOf(ctx, tenant, next, cur.GetCreateTime().AsTime())
			if err != nil {
				return nil, err
			}
			if err := limits.CheckInterval(tenant, sch, now); err != nil {
				return nil, err
			}
		}
		switch cur.GetStatus() {
		case sundialv1.JobStatus_JOB_STATUS_PAUSED:
			// Resume computes the next slot; only check the new schedule
			// can still fire.
			if scheduleChanged {
				if n, err := s.firstAfter(ctx, tenant, next, cur.GetCreateTime().AsTime(), now); err != nil {
					return nil, err
				} else if n.IsZero() {
					return nil, rejectErr(noInstantAfter(now))
				}
			}
		case sundialv1.JobStatus_JOB_STATUS_COMPLETED:
			// A completed job comes back only with a schedule that fires
			// again; other edits (a name, labels) leave it completed.
			if !scheduleChanged {
				break
			}
			fallthrough
		default:
			n, err := s.firstAfter(ctx, tenant, next, cur.GetCreateTime().AsTime(), now)
			if err != nil {
				return nil, err
			}
			switch {
			case !n.IsZero():
				next.Status, next.NextFireTime = sundialv1.JobStatus_JOB_STATUS_ACTIVE, timestamppb.New(n)
			case scheduleChanged:
				return nil, rejectErr(noInstantAfter(now))
			default:
				// An active job whose last slot is already staged or
				// running: it completes when that execution does.
				next.NextFireTime = nil
			}
		}
		return next, nil
	})
	if err != nil {
		return nil, s.statusOf(ctx, "UpdateJob", err)
	}
	s.changed(ctx, "updated", mut)
	return &sundialv1.UpdateJobResponse{Job: mut.Job}, nil
}

// PauseJob stops a job firing; its staged, unpublished firings are dropped
// and published ones are skipped by workers as stale. Pausing a paused job
// changes nothing.
func (s *JobService) PauseJob(ctx context.Context, req *sundialv1.PauseJobRequest) (*sundialv1.PauseJobResponse, error) {
	job, err := s.transition(ctx, "PauseJob", req.GetId(), req.GetExpectedVersion(), store.ActionPause, pausedReason, pauseJob)
	if err != nil {
		return nil, err
	}
	return &sundialv1.PauseJobResponse{Job: job}, nil
}

// pauseJob is PauseJob's decision (and BulkJobAction's pause).
func pauseJob(_ time.Time, cur *sundialv1.Job) (*sundialv1.Job, error) {
	switch cur.GetStatus() {
	case sundialv1.JobStatus_JOB_STATUS_PAUSED:
		return nil, nil
	case sundialv1.JobStatus_JOB_STATUS_ACTIVE:
		cur.Status, cur.NextFireTime = sundialv1.JobStatus_JOB_STATUS_PAUSED, nil
		return cur, nil
	default:
		return nil, reject(codes.FailedPrecondition, "job is %s; only an active job can be paused", firing.JobStatusWord(cur.GetStatus()))
	}
}

func pausedReason(*sundialv1.Job) string { return "job paused" }

// ResumeJob makes a paused job fire again from now on: slots missed while
// paused are not caught up; they are recorded in the ledger as SKIPPED
// with reason "paused" (paused.go). A job whose schedule has no slot left
// completes.
func (s *JobService) ResumeJob(ctx context.Context, req *sundialv1.ResumeJobRequest) (*sundialv1.ResumeJobResponse, error) {
	// A paused job has no scheduled firings staged; what resume drops is a
	// manual trigger, backfill or re-drive not yet published, staged under
	// the paused version.
	reason := func(next *sundialv1.Job) string { return fmt.Sprintf("job resumed as version %d", next.GetVersion()) }
	ctx, err := s.preloadJobCalendars(ctx, req.GetId(), nil)
	if err != nil {
		return nil, s.statusOf(ctx, "ResumeJob", err)
	}
	// The slots that fell in the pause are recorded SKIPPED (paused.go).
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	job, err := s.transitionSkipping(ctx, "ResumeJob", req.GetId(), req.GetExpectedVersion(), store.ActionResume, reason, s.pausedSkips(ctx, tenant), func(now time.Time, cur *sundialv1.Job) (*sundialv1.Job, error) {
		switch cur.GetStatus() {
		case sundialv1.JobStatus_JOB_STATUS_ACTIVE:
			return nil, nil
		case sundialv1.JobStatus_JOB_STATUS_PAUSED:
			n, err := s.firstAfter(ctx, cur.GetTenant(), cur, cur.GetCreateTime().AsTime(), now)
			if err != nil {
				return nil, err
			}
			if n.IsZero() {
				cur.Status, cur.NextFireTime = sundialv1.JobStatus_JOB_STATUS_COMPLETED, nil
			} else {
				cur.Status, cur.NextFireTime = sundialv1.JobStatus_JOB_STATUS_ACTIVE, timestamppb.New(n)
			}
			return cur, nil
		default:
			return nil, reject(codes.FailedPrecondition, "job is %s; only a paused job can be resumed", firing.JobStatusWord(cur.GetStatus()))
		}
	})
	if err != nil {
		return nil, err
	}
	return &sundialv1.ResumeJobResponse{Job: job}, nil
}

// DeleteJob soft-deletes a job: it stops firing at once, stays readable
// (status DELETED) and its history stays in the ledger. Deleting a deleted
// job changes nothing.
func (s *JobService) DeleteJob(ctx context.Context, req *sundialv1.DeleteJobRequest) (*sundialv1.DeleteJobResponse, error) {
	job, err := s.transition(ctx, "DeleteJob", req.GetId(), req.GetExpectedVersion(), store.ActionDelete, deletedReason, deleteJob)
	if err != nil {
		return nil, err
	}
	return &sundialv1.DeleteJobResponse{Job: job}, nil
}

// deleteJob is DeleteJob's decision (and BulkJobAction's delete).
func deleteJob(_ time.Time, cur *sundialv1.Job) (*sundialv1.Job, error) {
	if cur.GetStatus() == sundialv1.JobStatus_JOB_STATUS_DELETED {
		return nil, nil
	}
	cur.Status, cur.NextFireTime = sundialv1.JobStatus_JOB_STATUS_DELETED, nil
	return cur, nil
}

func deletedReason(*sundialv1.Job) string { return "job deleted" }

// transition is PauseJob's, ResumeJob's and DeleteJob's shared change:
// expected is the request's expected_version (0: any).
func (s *JobService) transition(ctx context.Context, op, rawID string, expected int64, action string, reason func(*sundialv1.Job) string, fn store.MutateFunc) (*sundialv1.Job, error) {
	return s.transitionSkipping(ctx, op, rawID, expected, action, reason, nil, fn)
}

// transitionSkipping is transition recording the slots skipped lists as
// SKIPPED in the change's transaction (nil: none).
func (s *JobService) transitionSkipping(ctx context.Context, op, rawID string, expected int64, action string, reason func(*sundialv1.Job) string, skipped store.SkippedFunc, fn store.MutateFunc) (*sundialv1.Job, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	id, err := jobID("id", rawID)
	if err != nil {
		return nil, err
	}
	if err := expectedVersion(expected); err != nil {
		return nil, err
	}
	change := store.Change{Audit: store.Audit{Actor: actorOf(ctx, tenant), Action: action}, DropReason: reason, ExpectedVersion: expected, Skipped: skipped}
	mut, err := s.store.Mutate(ctx, tenant, id, change, fn)
	if err != nil {
		return nil, s.statusOf(ctx, op, err)
	}
	s.changed(ctx, strings.ToLower(strings.TrimSuffix(op, "Job"))+"d", mut)
	return mut.Job, nil
}

// changed runs after a change committed: it tells workers the new version.
// A failed publish does not fail the request (the change is durable); it is
// logged and counted, and workers still skip the dropped firings because
// they were never published.
func (s *JobService) changed(ctx context.Context, what string, mut store.Mutated) {
	if !mut.Changed {
		return
	}
	s.metrics.droppedFirings.Add(float64(mut.DroppedFirings))
	job := mut.Job
	s.logger.InfoContext(ctx, "job changed", "change", what, "tenant", job.GetTenant(), "job", job.GetId(),
		"version", job.GetVersion(), "status", firing.JobStatusWord(job.GetStatus()), "dropped_firings", mut.DroppedFirings)
	// The caller may hang up once the change committed; publishing must
	// still happen.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.publishTimeout)
	defer cancel()
	if err := s.versions.PublishVersion(pctx, job.GetId(), job.GetVersion()); err != nil {
		s.metrics.versionPublishFailures.Inc()
		s.logger.ErrorContext(ctx, "publishing job version failed", "job", job.GetId(), "version", job.GetVersion(), "err", err)
	}
}

// TriggerJob stages one firing of the job now, outside its schedule. Active,
// paused and completed jobs can be triggered; deleted ones cannot.
func (s *JobService) TriggerJob(ctx context.Context, req *sundialv1.TriggerJobRequest) (*sundialv1.TriggerJobResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	id, err := jobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	actor := actorOf(ctx, tenant)
	// The one firing a trigger stages continues the call's trace.
	st := tracing.NewStager(ctx, s.tracer, tracing.AsChild())
	res, err := s.store.Stage(ctx, tenant, id, false, func(now time.Time, job *sundialv1.Job) (store.StagePlan, error) {
		if job.GetStatus() == sundialv1.JobStatus_JOB_STATUS_DELETED {
			return store.StagePlan{}, reject(codes.FailedPrecondition, "job is deleted")
		}
		execID := firing.TriggerExecutionID(uuid.MustParse(job.GetId()), now)
		f := firing.New(job, firing.Attempt{
			Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_TRIGGER, ExecutionID: execID.String(),
			Scheduled: now, Fire: now, Number: 1, FirstAttempt: 1, Staged: now,
		})
		st.Stage(f)
		return store.StagePlan{
			Firings: []store.Staged{{Firing: f}},
			Audit:   &store.Audit{Actor: actor, Action: store.ActionTrigger, Detail: map[string]any{"execution_id": f.GetExecutionId()}},
		}, nil
	})
	st.End(err)
	if err != nil {
		return nil, s.statusOf(ctx, "TriggerJob", err)
	}
	f := res.Plan.Firings[0].Firing
	s.metrics.triggers.Inc()
	s.logger.InfoContext(ctx, "job triggered", "tenant", tenant, "job", id, "execution", f.GetExecutionId())
	return &sundialv1.TriggerJobResponse{ExecutionId: f.GetExecutionId(), ScheduledTime: f.GetScheduledTime()}, nil
}

const (
	defaultPreviewCount = 10
	maxPreviewCount     = 1000
)

// PreviewSchedule lists the next instants of a schedule without storing
// anything. An interval without start_time is anchored at from.
func (s *JobService) PreviewSchedule(ctx context.Context, req *sundialv1.PreviewScheduleRequest) (*sundialv1.PreviewScheduleResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	var vs []jobspec.FieldViolation
	if err := jobspec.ValidateSchedule(req.GetSchedule()); err != nil {
		var jerr *jobspec.Error
		if errors.As(err, &jerr) {
			vs = append(vs, jerr.Violations...)
		}
	}
	from := s.clock.Now()
	if ts := req.GetFrom(); ts != nil {
		if ts.CheckValid() != nil {
			vs = append(vs, jobspec.FieldViolation{Field: "from", Description: "is not a valid timestamp"})
		} else {
			from = ts.AsTime()
		}
	}
	n := int(req.GetCount())
	switch {
	case n < 0:
		vs = append(vs, jobspec.FieldViolation{Field: "count", Description: fmt.Sprintf("must not be negative, got %d", n)})
	case n == 0:
		n = defaultPreviewCount
	case n > maxPreviewCount:
		n = maxPreviewCount
	}
	limit := req.GetMaxRuns()
	if limit < 0 || limit > jobspec.MaxRuns {
		vs = append(vs, jobspec.FieldViolation{Field: "max_runs", Description: fmt.Sprintf("must be between 0 (no limit) and %d, got %d", jobspec.MaxRuns, limit)})
	}
	if len(vs) > 0 {
		return nil, invalid(vs...)
	}
	sch, err := jobspec.FromProto(req.GetSchedule(), from)
	if err != nil {
		var jerr *jobspec.Error
		if errors.As(err, &jerr) {
			return nil, fromSpec(err)
		}
		return nil, invalidf("schedule", "%v", err)
	}
	if cal, err := s.jobCalendar(ctx, tenant, req.GetSchedule()); err != nil {
		return nil, s.statusOf(ctx, "PreviewSchedule", err)
	} else if cal != nil {
		if sch, err = calendar.Apply(sch, req.GetSchedule(), cal); err != nil {
			return nil, s.statusOf(ctx, "PreviewSchedule", err)
		}
	}
	resp := &sundialv1.PreviewScheduleResponse{Description: sch.Describe()}
	if limit > 0 && int64(n) >= limit {
		// The run-count limit ends the list: a new job's runs, counted
		// from `from`.
		n = int(limit)
	} else {
		limit = 0
	}
	for t := range schedule.Preview(sch, from, n) {
		resp.Times = append(resp.Times, timestamppb.New(t))
	}
	if limit > 0 && int64(len(resp.Times)) == limit {
		resp.RunLimit = jobspec.RunLimitNote(limit)
	}
	if len(resp.Times) > 0 {
		resp.Adjustments = previewAdjustments(sch, from, resp.Times[len(resp.Times)-1].AsTime())
	}
	return resp, nil
}

var errNoLedger = status.Error(codes.Unavailable, "execution history is not available on this server")

// ListExecutions returns the job's attempts from the ledger, newest first.
func (s *JobService) ListExecutions(ctx context.Context, req *sundialv1.ListExecutionsRequest) (*sundialv1.ListExecutionsResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	id, err := jobID("job_id", req.GetJobId())
	if err != nil {
		return nil, err
	}
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	// The ledger has no notion of tenants' jobs; Postgres says whose job
	// this is (deleted jobs keep their history). A purged job's row is gone
	// but its audit trail stays, and still names its tenant, so its history
	// stays readable for its owner.
	if _, err := s.store.Get(ctx, tenant, id); err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			return nil, s.statusOf(ctx, "ListExecutions", err)
		}
		trail, aerr := s.store.ListAudit(ctx, tenant, store.AuditQuery{JobID: id, Limit: 1})
		if aerr != nil || len(trail) == 0 {
			return nil, s.statusOf(ctx, "ListExecutions", err)
		}
	}
	if s.executions == nil {
		return nil, errNoLedger
	}
	attempts, next, err := s.executions.ListByJob(ctx, id, size, req.GetPageToken())
	if err != nil {
		return nil, s.ledgerStatus(ctx, "ListExecutions", err)
	}
	return &sundialv1.ListExecutionsResponse{Attempts: attempts, NextPageToken: next}, nil
}

// GetExecution returns every attempt of one of the tenant's executions.
func (s *JobService) GetExecution(ctx context.Context, req *sundialv1.GetExecutionRequest) (*sundialv1.GetExecutionResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	id, err := jobID("execution_id", req.GetExecutionId())
	if err != nil {
		return nil, err
	}
	if s.executions == nil {
		return nil, errNoLedger
	}
	attempts, err := s.executions.GetExecution(ctx, id)
	if err != nil {
		return nil, s.ledgerStatus(ctx, "GetExecution", err)
	}
	// Another tenant's execution is reported exactly like a missing one.
	attempts = slices.DeleteFunc(attempts, func(a *sundialv1.ExecutionAttempt) bool { return a.GetTenant() != tenant })
	if len(attempts) == 0 {
		return nil, status.Error(codes.NotFound, "execution not found")
	}
	return &sundialv1.GetExecutionResponse{Attempts: attempts}, nil
}

func (s *JobService) ledgerStatus(ctx context.Context, op string, err error) error {
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return status.Error(codes.NotFound, "execution not found")
	case errors.Is(err, ledger.ErrInvalidPageToken):
		return invalidf("page_token", "is not a token this server issued for this job")
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return err
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return status.FromContextError(ctxErr).Err()
	}
	s.logger.ErrorContext(ctx, "ledger read failed", "op", op, "err", err)
	return status.Error(codes.Unavailable, "the execution ledger is unavailable; retry later")
}
