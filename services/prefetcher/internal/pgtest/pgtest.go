// Package pgtest gives the prefetcher's tests a migrated Postgres schema of
// their own (testkit/testinfra's per-test schema with Sundial's migrations
// applied) and job fixtures stored the way the api stores them.
package pgtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/jobspec"
	"github.com/sundialhq/sundial/pkg/migrations"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// Schema creates a fresh schema (dropped when the test ends), applies the
// migrations and returns a DSN that selects it, for pools and child
// processes alike.
func Schema(t testing.TB) string {
	t.Helper()
	dsn := testinfra.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrations.Up(ctx, Pool(t, dsn), slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("pgtest: migrate: %v", err)
	}
	return dsn
}

// Pool opens a pool on dsn, closed when the test ends.
func Pool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	return testinfra.PostgresPool(t, dsn)
}

// InsertJob stores job as the api would (spec plus columns), with
// next_fire_at given as a SQL expression over now() (e.g.
// "date_trunc('second', now()) + interval '1 second'") and args. It returns
// the job's id.
func InsertJob(t testing.TB, pool *pgxpool.Pool, job *sundialv1.Job, nextFireAt string, args ...any) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	job = proto.Clone(job).(*sundialv1.Job)
	job.Id = id.String()
	if job.Tenant == "" {
		job.Tenant = "tenant-a"
	}
	jobspec.Normalize(job)
	spec, err := proto.Marshal(job)
	if err != nil {
		t.Fatalf("pgtest: marshal job: %v", err)
	}
	InsertRawJob(t, pool, id, job.Tenant, spec, int16(job.GetPriority()), nextFireAt, args...)
	return id
}

// InsertRawJob stores a job row with the given spec bytes as is.
func InsertRawJob(t testing.TB, pool *pgxpool.Pool, id uuid.UUID, tenant string, spec []byte, priority int16, nextFireAt string, args ...any) {
	t.Helper()
	n := len(args)
	q := fmt.Sprintf(`INSERT INTO jobs (id, tenant, spec, priority, partition, next_fire_at)
		VALUES ($%d, $%d, $%d, $%d, $%d, %s)`, n+1, n+2, n+3, n+4, n+5, nextFireAt)
	all := append(append([]any{}, args...), id, tenant, spec, priority, int16(firing.Partition(id)))
	if _, err := pool.Exec(context.Background(), q, all...); err != nil {
		t.Fatalf("pgtest: insert job: %v", err)
	}
}
