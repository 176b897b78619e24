package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/jobspec"
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
// Rows are copied in transactions of chunk rows (default 100,000); after
// each, progress (if not nil) gets the number loaded so far. It returns the
// number loaded, which is less than n only with an error.
func CopyJobs(ctx context.Context, pool *pgxpool.Pool, tenant string, n, chunk int, job func(i int) *sundialv1.Job, progress func(done int)) (int, error) {
	if chunk <= 0 {
		chunk = 100_000
	}
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return 0, fmt.Errorf("harness: read database clock: %w", err)
	}
	now = now.UTC()
	done := 0
	for done < n {
		src := &jobRows{tenant: tenant, now: now, from: done, to: min(done+chunk, n), job: job}
		src.i = src.from - 1
		copied, err := pool.CopyFrom(ctx, pgx.Identifier{"jobs"}, jobRowColumns, src)
		if err == nil {
			err = src.err
		}
		if err != nil {
			return done, fmt.Errorf("harness: copy jobs %d..%d: %w", src.from, src.to, err)
		}
		done += int(copied)
		if progress != nil {
			progress(done)
		}
	}
	return done, nil
}

// jobRowColumns are the columns store.Create inserts.
var jobRowColumns = []string{"id", "tenant", "name", "labels", "spec", "priority", "status", "version",
	"partition", "next_fire_at", "idempotency_key", "created_at", "updated_at"}

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
	// spec never carries next_fire_time: only the column tracks it.
	job.NextFireTime = nil
	spec, err := proto.Marshal(job)
	if err != nil {
		return nil, err
	}
	job.NextFireTime = timestamppb.New(next)
	labels := job.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	return []any{id, tenant, job.GetName(), labels, spec, int16(job.GetPriority()), "active",
		job.GetVersion(), int16(firing.Partition(id)), next, nil, now, now}, nil
}
