// Package ledgerttl is the per-tenant time to live of ledger rows: the
// tenant_ledger_ttl table in Postgres (migration 00018), which the api
// writes from its quotas file (Replace) and the ledger's writers read
// (Load, and a Cache that reloads it on an interval and answers For).
//
// Postgres, not the quotas file, is where the writers look because the
// writers are many processes on many hosts (every worker, every
// prefetcher's drainer), all of which already reach Postgres, while the
// file is the api's; one table gives them one answer that changes without
// a restart, and the api stays its one writer.
package ledgerttl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/ledger"
)

// Refresh is how often the writers reload the table: a changed TTL applies
// to rows written from at most this long after the api wrote it.
const Refresh = time.Minute

// Default is the key of the default TTL, for tenants without one of their
// own (a tenant name is never empty).
const Default = ""

// TTLs are the configured TTLs by tenant (Default for the rest).
type TTLs map[string]time.Duration

// For is tenant's TTL: its own, else the configured default, else
// ledger.TTL.
func (t TTLs) For(tenant string) time.Duration {
	if d, ok := t[tenant]; ok {
		return d
	}
	if d, ok := t[Default]; ok {
		return d
	}
	return ledger.TTL
}

// ErrInvalid is wrapped by Validate's errors.
var ErrInvalid = errors.New("ledgerttl: invalid")

// Validate checks every TTL is whole seconds within [ledger.MinTTL,
// ledger.MaxTTL], naming the tenant of the first that is not.
func (t TTLs) Validate() error {
	for tenant, d := range t {
		name := "tenant " + tenant
		if tenant == Default {
			name = "the default"
		}
		switch {
		case d < ledger.MinTTL || d > ledger.MaxTTL:
			return fmt.Errorf("%w: ledger_ttl of %s: must be between %s and %s, got %s", ErrInvalid, name, ledger.MinTTL, ledger.MaxTTL, d)
		case d%time.Second != 0:
			return fmt.Errorf("%w: ledger_ttl of %s: must be whole seconds, got %s", ErrInvalid, name, d)
		}
	}
	return nil
}

// Querier is what Load needs: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Load reads the table.
func Load(ctx context.Context, q Querier) (TTLs, error) {
	rows, err := q.Query(ctx, `SELECT tenant, ttl_seconds FROM tenant_ledger_ttl`)
	if err != nil {
		return nil, fmt.Errorf("ledgerttl: load: %w", err)
	}
	out := TTLs{}
	var tenant string
	var secs int32
	_, err = pgx.ForEachRow(rows, []any{&tenant, &secs}, func() error {
		out[tenant] = time.Duration(secs) * time.Second
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ledgerttl: load: %w", err)
	}
	return out, nil
}

// Replace makes the table hold exactly t (in tx, so readers see the old
// set or the new one), after validating it; an invalid t writes nothing.
func Replace(ctx context.Context, tx pgx.Tx, t TTLs) error {
	if err := t.Validate(); err != nil {
		return err
	}
	tenants := make([]string, 0, len(t))
	secs := make([]int32, 0, len(t))
	for tenant, d := range t {
		tenants, secs = append(tenants, tenant), append(secs, int32(d/time.Second))
	}
	if _, err := tx.Exec(ctx, `DELETE FROM tenant_ledger_ttl WHERE tenant <> ALL($1::text[])`, tenants); err != nil {
		return fmt.Errorf("ledgerttl: replace: %w", err)
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO tenant_ledger_ttl (tenant, ttl_seconds)
		SELECT * FROM unnest($1::text[], $2::integer[])
		ON CONFLICT (tenant) DO UPDATE SET ttl_seconds = excluded.ttl_seconds, updated_at = now()
		 WHERE tenant_ledger_ttl.ttl_seconds <> excluded.ttl_seconds`, tenants, secs)
	if err != nil {
		return fmt.Errorf("ledgerttl: replace: %w", err)
	}
	return nil
}

// Cache holds the table as last loaded and reloads it every interval;
// For never blocks on Postgres. Until the first load succeeds every tenant
// gets ledger.TTL.
type Cache struct {
	q        Querier
	interval time.Duration
	clk      clock.Clock
	log      *slog.Logger
	runner   lifecycle.Runner

	mu   sync.RWMutex
	ttls TTLs
}

// NewCache returns a cache over q (whose search_path picks the schema).
func NewCache(q Querier, interval time.Duration, clk clock.Clock, log *slog.Logger) *Cache {
	return &Cache{q: q, interval: interval, clk: clk, log: log.With("component", "ledgerttl")}
}

// For is tenant's TTL as last loaded.
func (c *Cache) For(tenant string) time.Duration {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ttls.For(tenant)
}

// Reload loads the table once; a failure keeps the TTLs loaded before.
func (c *Cache) Reload(ctx context.Context) error {
	t, err := Load(ctx, c.q)
	if err != nil {
		return err
	}
	c.mu.Lock()
	changed := !maps.Equal(c.ttls, t)
	c.ttls = t
	c.mu.Unlock()
	if changed {
		c.log.Info("ledger TTLs loaded", "tenants", len(t), "default", t.For("\x00none"))
	}
	return nil
}

// Start reloads the table now and every interval after, in the
// background, until Stop (a lifecycle.Service).
func (c *Cache) Start(context.Context) error {
	return c.runner.Run(func(ctx context.Context) error { c.loop(ctx); return nil })
}

// Stop ends the reloads.
func (c *Cache) Stop() { c.runner.Stop() }

func (c *Cache) loop(ctx context.Context) {
	timer := c.clk.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		if err := c.Reload(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("reloading ledger TTLs failed; keeping the last ones", "err", err)
		}
		timer.Reset(c.interval)
	}
}

// Has reports whether tenant has an entry of its own (Default: whether a
// default is configured).
func (t TTLs) Has(tenant string) bool {
	_, ok := t[tenant]
	return ok
}
