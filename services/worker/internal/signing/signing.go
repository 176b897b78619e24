// Package signing signs what the worker sends for a tenant — target
// requests, Kafka target records, completion callbacks — with that
// tenant's own webhook signing keys (pkg/postgres/signingkey), and with nothing
// shared between tenants.
//
// A Keyring holds every tenant's valid keys in memory, refreshed from
// Postgres every few seconds (one query for all tenants), so the firing
// path seldom waits on the database: a new key is used within one refresh
// of its creation, and a rotated-out key is dropped at its expiry even
// between refreshes (its expiry travels with it). During a rotation's
// overlap a request is signed with both keys, the current first, each
// named (pkg/domain/signature.SignKeys), so a target holding either verifies it;
// a rotation overlaps with the tenant's previous key only.
//
// A tenant the keyring holds no key of (its first job was created since
// the last refresh, or it has jobs from before per-tenant keys) is asked
// for at once, by that tenant: the keyring reads its keys, making its
// first if it has none (signingkey.Store.Ensure), before signing. If
// Postgres does not answer, the keys already held keep signing; a tenant
// whose keys could not be had is sent a signature header without a
// signature, which its targets refuse, and that is logged once until it
// recovers.
//
// The platform's secret signs nothing, except during a migration from it:
// with a platform secret and an instant (the worker's
// --platform-signature-until), requests sent before that instant also
// carry an unnamed v1 by the platform secret, after the tenant's keys, so
// targets still verifying with it keep passing while they move to their
// tenant's key; from that instant on it is never sent.
//
// A key that does not open (another key-encryption key sealed it) is
// skipped and reported by tenant and id, never by value.
package signing

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/signature"
	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// Source reads every tenant's valid keys, and one tenant's, making its
// first if it has none; *signingkey.Store is one.
type Source interface {
	Valid(ctx context.Context) (map[string][]signingkey.Key, []signingkey.Unopened, error)
	Ensure(ctx context.Context, tenant, actor string) ([]signingkey.Key, error)
}

// DefaultRefresh is how often a Keyring reloads the keys.
const DefaultRefresh = 5 * time.Second

// Actor is who the audit trail says made a key a worker made.
const Actor = "sundial-worker"

// missTimeout bounds the wait for a tenant's keys on the firing path.
const missTimeout = 5 * time.Second

// Keyring signs with each tenant's keys. Its zero value is not usable:
// build one with New.
type Keyring struct {
	runner        lifecycle.Runner
	platform      []signature.Key
	platformUntil time.Time
	src           Source
	refresh       time.Duration
	clk           clock.Clock
	logger        *slog.Logger

	keys atomic.Pointer[map[string][]signingkey.Key]
	// missMu serialises the asks for tenants not held: one query per
	// tenant however many of its firings wait.
	missMu   sync.Mutex
	mu       sync.Mutex
	reported map[signingkey.Unopened]bool
	// failing: the tenants whose keys could not be had, and when that was
	// learnt. Logged once; not asked for again within a refresh interval,
	// so a Postgres that does not answer costs each tenant one wait per
	// interval, not one per request.
	failing map[string]time.Time
}

// Option configures a Keyring.
type Option func(*Keyring)

// WithPlatformSignature also signs every request sent before until with
// secret (the platform's), unnamed and last: the migration of targets
// that verified with the platform's secret to their tenant's keys. A zero
// until or an empty secret: never.
func WithPlatformSignature(secret []byte, until time.Time) Option {
	return func(k *Keyring) {
		if len(secret) > 0 && !until.IsZero() {
			k.platform, k.platformUntil = []signature.Key{{Secret: secret}}, until
		}
	}
}

// New returns a keyring signing with the tenants' keys from src. clk is
// the corrected clock, which dates each key's expiry against the
// database's.
func New(src Source, refresh time.Duration, clk clock.Clock, logger *slog.Logger, opts ...Option) *Keyring {
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	k := &Keyring{src: src, refresh: refresh, clk: clk, logger: logger,
		reported: map[signingkey.Unopened]bool{}, failing: map[string]time.Time{}}
	for _, o := range opts {
		o(k)
	}
	return k
}

// Sign returns the signature header of a request for tenant sent at ts:
// by each of the tenant's keys valid at ts (and, before the migration's
// end, by the platform secret).
func (k *Keyring) Sign(tenant string, ts time.Time, executionID string, body []byte) string {
	return signature.SignKeys(k.Keys(tenant, ts), ts, executionID, body)
}

// Keys returns what Sign signs tenant's requests at ts with. A tenant not
// held is asked for first (see the package comment).
func (k *Keyring) Keys(tenant string, ts time.Time) []signature.Key {
	keys, ok := k.held(tenant)
	if !ok {
		keys = k.ask(tenant)
	}
	var out []signature.Key
	for _, key := range keys {
		if key.Current() || ts.Before(key.ExpiresAt) {
			out = append(out, signature.Key{ID: key.ID, Secret: key.Secret})
		}
	}
	if k.platform != nil && ts.Before(k.platformUntil) {
		out = append(out, k.platform...)
	}
	return out
}

func (k *Keyring) held(tenant string) ([]signingkey.Key, bool) {
	m := k.keys.Load()
	if m == nil {
		return nil, false
	}
	keys, ok := (*m)[tenant]
	return keys, ok && len(keys) > 0
}

// ask reads tenant's keys (making its first if it has none) and adds them
// to those held until the next refresh, which reads them anyway.
func (k *Keyring) ask(tenant string) []signingkey.Key {
	if k.src == nil {
		return nil
	}
	k.missMu.Lock()
	defer k.missMu.Unlock()
	if keys, ok := k.held(tenant); ok {
		return keys // asked for while this call waited
	}
	k.mu.Lock()
	failedAt, failed := k.failing[tenant]
	k.mu.Unlock()
	if failed && k.clk.Now().Before(failedAt.Add(k.refresh)) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), missTimeout)
	defer cancel()
	keys, err := k.src.Ensure(ctx, tenant, Actor)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil || len(keys) == 0 {
		if !failed {
			k.logger.Error("no signing key for the tenant; its requests go out unsigned and its targets refuse them until one is had",
				"tenant", tenant, "err", err)
		}
		k.failing[tenant] = k.clk.Now()
		return nil
	}
	if failed {
		delete(k.failing, tenant)
		k.logger.Info("signing key for the tenant had again", "tenant", tenant)
	}
	// Copy on write: Keys reads the map without a lock.
	next := map[string][]signingkey.Key{}
	if m := k.keys.Load(); m != nil {
		maps.Copy(next, *m)
	}
	next[tenant] = keys
	k.keys.Store(&next)
	return keys
}

// Refresh reloads the keys once. On an error the keys held stay.
func (k *Keyring) Refresh(ctx context.Context) error {
	if k.src == nil {
		return nil
	}
	m, bad, err := k.src.Valid(ctx)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys.Store(&m)
	for t := range m {
		delete(k.failing, t)
	}
	for _, u := range bad {
		if !k.reported[u] {
			k.reported[u] = true
			k.logger.Error("signing key does not open with this worker's key-encryption key; the tenant's requests are signed with its other keys, or unsigned",
				"tenant", u.Tenant, "key_id", u.ID)
		}
	}
	return nil
}

// Tenants lists the tenants that have keys, for tests and logs.
func (k *Keyring) Tenants() []string {
	m := k.keys.Load()
	if m == nil {
		return nil
	}
	var out []string
	for t := range *m {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Start loads the keys once (a failure is logged, not fatal: each tenant
// is asked for at its first request until a refresh succeeds) and
// refreshes them in the background until Stop.
func (k *Keyring) Start(ctx context.Context) error {
	if k.src == nil {
		return nil
	}
	if err := k.Refresh(ctx); err != nil {
		k.logger.Warn("signing keys not loaded; each tenant's are asked for at its first request until they are", "err", err)
	}
	return k.runner.Run(func(ctx context.Context) error {
		t := k.clk.NewTimer(k.refresh)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C():
			}
			rctx, cancel := context.WithTimeout(ctx, k.refresh)
			err := k.Refresh(rctx)
			cancel()
			switch {
			case err != nil && !failing && ctx.Err() == nil:
				failing = true
				k.logger.Warn("signing keys not refreshed; the keys held keep signing", "err", err)
			case err == nil && failing:
				failing = false
				k.logger.Info("signing keys refreshed again")
			}
			t.Reset(k.refresh)
		}
	})
}

// Stop ends the refreshes; safe before Start and more than once.
func (k *Keyring) Stop() { k.runner.Stop() }
