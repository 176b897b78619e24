//go:build integration

package ledgerttl_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/postgres/ledgerttl"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

func TestReplaceLoadAndCache(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	replace := func(ttls ledgerttl.TTLs) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := ledgerttl.Replace(ctx, tx, ttls); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	cache := ledgerttl.NewCache(pool, time.Minute, clock.Real{}, log)
	if got := cache.For("acme"); got != ledger.TTL {
		t.Fatalf("before any load: %s", got)
	}
	first := ledgerttl.TTLs{ledgerttl.Default: 30 * 24 * time.Hour, "acme": 2 * time.Hour, "gone": 3 * time.Hour}
	if err := replace(first); err != nil {
		t.Fatal(err)
	}
	if err := cache.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if a, o := cache.For("acme"), cache.For("other"); a != 2*time.Hour || o != 30*24*time.Hour {
		t.Fatalf("acme %s, other %s", a, o)
	}
	// A replace drops tenants no longer configured and changes the rest;
	// an invalid one writes nothing.
	if err := replace(ledgerttl.TTLs{"acme": 4 * time.Hour, "bad": time.Second}); err == nil {
		t.Fatal("an invalid TTL was accepted")
	}
	if err := replace(ledgerttl.TTLs{"acme": 4 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	got, err := ledgerttl.Load(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["acme"] != 4*time.Hour {
		t.Fatalf("after replace: %v", got)
	}
	if err := cache.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if g, o := cache.For("gone"), cache.For("other"); g != ledger.TTL || o != ledger.TTL {
		t.Fatalf("dropped tenant %s, other %s: want the ledger's default", g, o)
	}
}
