// Package pgtest gives each test its own Postgres schema with Sundial's
// migrations applied, dropped when the test ends.
//
// It is a stop-gap until pkg/testinfra's shared helpers land; the
// prefetcher's tests switch to those then.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/jobspec"
	"github.com/sundialhq/sundial/pkg/migrations"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// DefaultDSN is the local infrastructure's database.
const DefaultDSN = "postgres://sundial:sundial@127.0.0.1:5432/sundial?sslmode=disable"

// BaseDSN is SUNDIAL_TEST_POSTGRES_DSN or DefaultDSN.
func BaseDSN() string {
	if d := os.Getenv("SUNDIAL_TEST_POSTGRES_DSN"); d != "" {
		return d
	}
	return DefaultDSN
}

// Schema creates a fresh schema, migrates it and returns a DSN whose
// search_path selects it (for pools and for child processes alike).
func Schema(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + sanitize(t.Name()) + "_" + hex.EncodeToString(b[:])

	admin, err := pgx.Connect(ctx, BaseDSN())
	if err != nil {
		t.Fatalf("pgtest: connect: %v (is deploy/local/infra.sh up?)", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, BaseDSN())
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})

	u, err := url.Parse(BaseDSN())
	if err != nil {
		t.Fatalf("pgtest: dsn: %v", err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	dsn := u.String()

	pool := Pool(t, dsn)
	if err := migrations.Up(ctx, pool, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("pgtest: migrate: %v", err)
	}
	return dsn
}

// Pool opens a pool on dsn, closed when the test ends.
func Pool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func sanitize(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 40 {
		out = out[:40]
	}
	return out
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
