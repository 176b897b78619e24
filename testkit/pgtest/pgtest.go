// Package pgtest gives a test a migrated Postgres schema of its own
// (testinfra's per-test schema with Sundial's migrations applied, dropped
// when the test ends) and writes jobs rows the way the api's CreateJob
// stores them (services/api/internal/store: the same columns, the spec
// encoded without its output-only fields, partition = firing.Partition(id)).
//
// It is the one place tests get either from: a test that needs the schema
// calls Migrated (or Schema and Pool, to share the DSN with a child
// process), and a test that needs a job row calls InsertJob, or CopyJobs
// for the tens of thousands a query plan is tested on. The row itself is
// harness.StoredJobRow, which the benchmark's harness.CopyJobs (loads of
// millions, each job validated and given its first slot) writes too.
package pgtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/postgres/migrations"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// DefaultTenant is the tenant InsertJob stores a job under when the job
// names none.
const DefaultTenant = "tenant-a"

// Schema creates a fresh schema (dropped when the test ends), applies the
// migrations and returns a DSN that selects it, for pools and child
// processes alike.
func Schema(t testing.TB) string {
	t.Helper()
	dsn := testinfra.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrations.Up(ctx, Pool(t, dsn), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("pgtest: migrate: %v", err)
	}
	return dsn
}

// Pool opens a pool on dsn, closed when the test ends.
func Pool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	return testinfra.PostgresPool(t, dsn)
}

// Migrated returns a pool on a fresh migrated schema of the test's own:
// Pool(t, Schema(t)).
func Migrated(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return Pool(t, Schema(t))
}

// jobColumns are harness.JobColumns; the instants are the database
// clock's now() as in one CreateJob transaction.
var jobColumns = harness.JobColumns

// InsertJob stores job as the api's CreateJob would, with next_fire_at
// given as a SQL expression (e.g. "date_trunc('second', now()) + interval
// '1 second'", "NULL", or "$1" with args) and returns the job's id. The
// job's id, tenant, status and version are used when set; otherwise a new
// UUIDv7, DefaultTenant, active and 1. The job is normalised as the api
// normalises it; the caller's message is not changed.
func InsertJob(t testing.TB, pool *pgxpool.Pool, job *sundialv1.Job, nextFireAt string, args ...any) uuid.UUID {
	t.Helper()
	id, row, err := jobRow(job)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	insert(t, pool, nextFireAt, args, row)
	return id
}

// InsertRawJob stores an active job row at version 1 with the given spec
// bytes as they are (a spec no release can decode, say); next_fire_at as
// for InsertJob.
func InsertRawJob(t testing.TB, pool *pgxpool.Pool, id uuid.UUID, tenant string, spec []byte, priority int16, nextFireAt string, args ...any) {
	t.Helper()
	insert(t, pool, nextFireAt, args, []any{id, tenant, "", map[string]string{}, spec, priority, firing.JobActiveSQL, int64(1), int16(firing.Partition(id))})
}

// CopyJobs stores n jobs in one COPY, job(i) giving the i-th as for
// InsertJob, with next_fire_at its NextFireTime (none: NULL), as the api
// stores it: for the tables of tens of thousands of jobs a query plan is
// tested on. It returns the ids in order.
func CopyJobs(t testing.TB, pool *pgxpool.Pool, n int, job func(i int) *sundialv1.Job) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	src := pgx.CopyFromFunc(func() func() ([]any, error) {
		i := -1
		return func() ([]any, error) {
			if i++; i == n {
				return nil, nil
			}
			j := job(i)
			id, row, err := jobRow(j)
			if err != nil {
				return nil, err
			}
			ids[i] = id
			var next *time.Time
			if ts := j.GetNextFireTime(); ts != nil {
				at := ts.AsTime()
				next = &at
			}
			return append(row, next), nil
		}
	}())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	copied, err := pool.CopyFrom(ctx, pgx.Identifier{"jobs"}, jobColumns, src)
	if err != nil {
		t.Fatalf("pgtest: copy %d jobs: %v", n, err)
	}
	if copied != int64(n) {
		t.Fatalf("pgtest: copied %d jobs, want %d", copied, n)
	}
	return ids
}

// jobRow is the job's id and its row in jobColumns order up to partition,
// the job's unset id, tenant, status and version defaulted and the job
// normalised as the api normalises it.
func jobRow(job *sundialv1.Job) (uuid.UUID, []any, error) {
	job = proto.Clone(job).(*sundialv1.Job)
	id := uuid.Must(uuid.NewV7())
	if job.GetId() != "" {
		var err error
		if id, err = uuid.Parse(job.GetId()); err != nil {
			return id, nil, fmt.Errorf("job id %q: %w", job.GetId(), err)
		}
	}
	job.Id = id.String()
	if job.Tenant == "" {
		job.Tenant = DefaultTenant
	}
	if job.Status == sundialv1.JobStatus_JOB_STATUS_UNSPECIFIED {
		job.Status = sundialv1.JobStatus_JOB_STATUS_ACTIVE
	}
	if job.Version == 0 {
		job.Version = 1
	}
	jobspec.Normalize(job)
	row, err := harness.StoredJobRow(job)
	return id, row, err
}

// insert writes row (jobColumns up to partition) with next_fire_at the
// SQL expression nextFireAt over args.
func insert(t testing.TB, pool *pgxpool.Pool, nextFireAt string, args []any, row []any) {
	t.Helper()
	n := len(args)
	ph := make([]string, len(row))
	for i := range row {
		ph[i] = fmt.Sprintf("$%d", n+i+1)
	}
	q := fmt.Sprintf("INSERT INTO jobs (%s) VALUES (%s, %s)", strings.Join(jobColumns, ", "), strings.Join(ph, ", "), nextFireAt)
	if _, err := pool.Exec(context.Background(), q, append(append([]any{}, args...), row...)...); err != nil {
		t.Fatalf("pgtest: insert job: %v", err)
	}
}
