//go:build integration

package harness

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/postgres/migrations"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// TestNamespaceCopyJobsDrop makes a namespace, loads jobs with CopyJobs
// (several streams) into the schema the migrations create, and checks that
// Drop leaves nothing of the schema behind.
func TestNamespaceCopyJobsDrop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	in := InfraFromEnv()
	ns, err := NewNamespace(ctx, in, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	dropped := false
	defer func() {
		if !dropped {
			_ = ns.Drop(context.Background())
		}
	}()
	pool, err := pgxpool.New(ctx, ns.PostgresDSN)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		pool.Close()
		t.Fatal(err)
	}
	at := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	const n = 2500
	var calls int
	loaded, err := CopyJobs(ctx, pool, "acme", n, CopyOptions{Chunk: 1000, Streams: 3, Progress: func(int) { calls++ }}, func(i int) *sundialv1.Job {
		return &sundialv1.Job{
			Name:     "bulk",
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(at.Add(time.Duration(i) * time.Second))}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://example.com/x"}}},
		}
	})
	if err != nil || loaded != n || calls != 3 {
		pool.Close()
		t.Fatalf("CopyJobs = %d, %v after %d progress calls; want %d in 3 chunks", loaded, err, calls, n)
	}
	var count, due int
	err = pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE next_fire_at >= $1 AND status = 'active' AND tenant = 'acme') FROM jobs`, at).Scan(&count, &due)
	pool.Close()
	if err != nil || count != n || due != n {
		t.Fatalf("jobs: %d rows, %d active with their instant (%v); want %d", count, due, err, n)
	}
	if err := ns.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	dropped = true
	conn, err := pgxpool.New(ctx, in.PostgresDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, ns.Schema).Scan(&exists); err != nil || exists {
		t.Fatalf("schema %s still exists after Drop (%v)", ns.Schema, err)
	}
}
