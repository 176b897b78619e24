package harness

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// CopyJobs loads n jobs straight into the jobs table with COPY, for
// loads (millions of jobs) that CreateJob calls would take hours to make.
// job(i) gives the i-th job as a client would send it; each is validated
// and stored exactly as the api's CreateJob stores it (services/api/
// internal/store.Create): jobspec.Validate and Normalize, a UUIDv7 id, the
// tenant, status active, version 1, creation and update instants from the
// database clock (read once for the whole load), spec = the encoded job
// without next_fire_time, next_fire_at = the first slot after that
// instant, partition = firing.Partition(id), no idempotency key. Only the
// jobs row is written: no audit row (the api records a "create" entry per
// job) and no NOTIFY (the prefetcher finds due jobs on its next tick).
//
// job is called from several goroutines at once (see CopyOptions.Streams).
// It returns the number of jobs loaded, which is less than n only with an
// error.
func CopyJobs(ctx context.Context, pool *pgxpool.Pool, tenant string, n int, o CopyOptions, job func(i int) *sundialv1.Job) (int, error) {
	if o.Chunk <= 0 {
		o.Chunk = 100_000
	}
	if o.Streams <= 0 {
		o.Streams = 2
	}
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return 0, fmt.Errorf("harness: read database clock: %w", err)
	}
	now = now.UTC()
	var (
		mu   sync.Mutex
		done int
	)
	chunks := (n + o.Chunk - 1) / o.Chunk
	err := Parallel(ctx, chunks, o.Streams, func(ctx context.Context, c int) error {
		src := &jobRows{tenant: tenant, now: now, from: c * o.Chunk, to: min((c+1)*o.Chunk, n), job: job}
		src.i = src.from - 1
		copied, err := pool.CopyFrom(ctx, pgx.Identifier{"jobs"}, jobRowColumns, src)
		if err == nil {
			err = src.err
		}
		if err != nil {
			return fmt.Errorf("harness: copy jobs %d..%d: %w", src.from, src.to, err)
		}
		mu.Lock()
		defer mu.Unlock()
		done += int(copied)
		if o.Progress != nil {
			o.Progress(done)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	return done, err
}

// CopyOptions tune CopyJobs.
type CopyOptions struct {
	// Chunk is how many rows one COPY (one transaction) loads; 100,000 by
	// default.
	Chunk int
	// Streams is how many COPYs run at once, each on a connection of its
	// own; 2 by default, so building rows and Postgres's inserting them use
	// both cores of a small machine.
	Streams int
	// Progress, when set, is called (one call at a time) after each chunk
	// with the number of rows loaded so far.
	Progress func(done int)
}

// JobColumns are the columns of a jobs row that the api's store.Create
// writes, less the idempotency key and hash and the instants; StoredJobRow
// gives their values up to partition (next_fire_at is the caller's).
var JobColumns = []string{"id", "tenant", "name", "labels", "spec", "priority", "status", "version", "partition", "next_fire_at"}

// jobRowColumns are the columns CopyJobs loads: JobColumns, no key, and
// the creation instants.
var jobRowColumns = append(append([]string{}, JobColumns...), "idempotency_key", "created_at", "updated_at")

// StoredJobRow is the row of JobColumns up to partition that the api's
// store.Create writes for job, which carries its id, tenant, status and
// version already: spec and labels as jobspec.StoredSpec and StoredLabels
// encode them (the api's encoding), partition firing.Partition(id). The one encoding of a jobs row in testkit
// (CopyJobs here, and testkit/pgtest, use it); job is not changed.
func StoredJobRow(job *sundialv1.Job) ([]any, error) {
	id, err := uuid.Parse(job.GetId())
	if err != nil {
		return nil, fmt.Errorf("harness: job id %q: %w", job.GetId(), err)
	}
	spec, err := jobspec.StoredSpec(job)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	return []any{id, job.GetTenant(), job.GetName(), jobspec.StoredLabels(job), spec, int16(job.GetPriority()),
		firing.JobStatusSQL(job.GetStatus()), job.GetVersion(), int16(firing.Partition(id))}, nil
}

// jobRows is a pgx.CopyFromSource building rows [from, to) on demand.
type jobRows struct {
	tenant   string
	now      time.Time
	from, to int
	job      func(i int) *sundialv1.Job

	i   int
	row []any
	err error
}

func (r *jobRows) Next() bool {
	r.i++
	if r.i >= r.to || r.err != nil {
		return false
	}
	r.row, r.err = JobRow(r.job(r.i), r.tenant, r.now)
	return r.err == nil
}

func (r *jobRows) Values() ([]any, error) { return r.row, r.err }

func (r *jobRows) Err() error { return r.err }

// JobRow is the jobs row (in jobRowColumns order) the api's CreateJob would
// write for job created by tenant at now (the database clock); job is
// modified in place into the stored job.
func JobRow(job *sundialv1.Job, tenant string, now time.Time) ([]any, error) {
	if err := jobspec.Validate(job); err != nil {
		return nil, err
	}
	jobspec.Normalize(job)
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	job.Id, job.Tenant = id.String(), tenant
	job.Status, job.Version = sundialv1.JobStatus_JOB_STATUS_ACTIVE, 1
	job.CreateTime, job.UpdateTime = timestamppb.New(now), timestamppb.New(now)
	sched, err := jobspec.Schedule(job, now)
	if err != nil {
		return nil, err
	}
	next := sched.Next(now)
	if next.IsZero() {
		return nil, fmt.Errorf("harness: job %q has no instant after %s", job.GetName(), now.Format(time.RFC3339))
	}
	job.NextFireTime = timestamppb.New(next)
	row, err := StoredJobRow(job)
	if err != nil {
		return nil, err
	}
	return append(row, next, nil, now, now), nil
}
