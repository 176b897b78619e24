//go:build integration

package migrations_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/postgres/migrations"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// Up applies every migration into the pool's schema, a second Up applies
// none, and the jobs table carries the autovacuum settings that keep its
// churn of hot rows vacuumed whatever the number of idle rows.
func TestUpAppliesEveryMigrationOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := testinfra.Postgres(t)
	for range 2 {
		if err := migrations.Up(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
	}
	v, err := migrations.Version(ctx, pool)
	if err != nil || v < 4 {
		t.Fatalf("version %d (%v), want at least 4", v, err)
	}
	var opts []string
	if err := pool.QueryRow(ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'jobs'::regclass`).Scan(&opts); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=20000", "autovacuum_vacuum_cost_limit=2000"} {
		if !slices.Contains(opts, want) {
			t.Errorf("jobs reloptions %v lack %s", opts, want)
		}
	}
}
