// Package signing signs what the worker sends for a tenant — target
// requests, Kafka target records — with that tenant's own webhook signing
// keys (pkg/signingkey), and with the platform's --signing-secret for a
// tenant that has none.
//
// A Keyring holds every tenant's valid keys in memory, refreshed from
// Postgres every few seconds (one query for all tenants), so the firing
// path never waits on the database: a new key is used within one refresh
// of its creation, and a rotated-out key is dropped at its expiry even
// between refreshes (its expiry travels with it). During a rotation's
// overlap a request is signed with both keys, the current first, each
// named (pkg/signature.SignKeys), so a target holding either verifies it.
// Likewise, until a first key's platform overlap ends, the platform secret
// signs beside the tenant's key (an unnamed v1, last), so targets still
// verifying with the platform secret keep passing while they move.
//
// If Postgres does not answer, the keys already held keep signing; a
// worker that has never loaded them signs with the platform secret and
// logs that it does. A key that does not open (another key-encryption key
// sealed it) is skipped and reported by tenant and id, never by value.
package signing

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/lifecycle"
	"github.com/sundialhq/sundial/pkg/signature"
	"github.com/sundialhq/sundial/pkg/signingkey"
)

// Source reads every tenant's valid keys; *signingkey.Store is one.
type Source interface {
	Valid(ctx context.Context) (map[string][]signingkey.Key, []signingkey.Unopened, error)
}

// DefaultRefresh is how often a Keyring reloads the keys.
const DefaultRefresh = 5 * time.Second

// Keyring signs with each tenant's keys. Its zero value is not usable:
// build one with New.
type Keyring struct {
	runner   lifecycle.Runner
	fallback []signature.Key
	src      Source
	refresh  time.Duration
	clk      clock.Clock
	logger   *slog.Logger

	keys     atomic.Pointer[map[string][]signingkey.Key]
	mu       sync.Mutex
	reported map[signingkey.Unopened]bool
}

// New returns a keyring signing with fallback (the platform secret) for
// tenants without keys; src nil means no tenant has keys. clk is the
// corrected clock, which dates each key's expiry against the database's.
func New(fallback []byte, src Source, refresh time.Duration, clk clock.Clock, logger *slog.Logger) *Keyring {
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Keyring{fallback: []signature.Key{{Secret: fallback}}, src: src, refresh: refresh, clk: clk, logger: logger,
		reported: map[signingkey.Unopened]bool{}}
}

// Sign returns the signature header of a request for tenant sent at ts:
// by each of the tenant's keys valid at ts, or by the platform secret.
func (k *Keyring) Sign(tenant string, ts time.Time, executionID string, body []byte) string {
	return signature.SignKeys(k.Keys(tenant, ts), ts, executionID, body)
}

// Keys returns what Sign signs tenant's requests at ts with.
func (k *Keyring) Keys(tenant string, ts time.Time) []signature.Key {
	if m := k.keys.Load(); m != nil {
		var (
			out      []signature.Key
			platform bool
		)
		for _, key := range (*m)[tenant] {
			if key.Current() || ts.Before(key.ExpiresAt) {
				out = append(out, signature.Key{ID: key.ID, Secret: key.Secret})
				platform = platform || ts.Before(key.PlatformUntil)
			}
		}
		if len(out) > 0 {
			if platform {
				out = append(out, k.fallback...)
			}
			return out
		}
	}
	return k.fallback
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
	k.keys.Store(&m)
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, u := range bad {
		if !k.reported[u] {
			k.reported[u] = true
			k.logger.Error("signing key does not open with this worker's key-encryption key; the tenant's requests are signed with its other keys or the platform secret",
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

// Start loads the keys once (a failure is logged, not fatal: the platform
// secret signs until a refresh succeeds) and refreshes them in the
// background until Stop.
func (k *Keyring) Start(ctx context.Context) error {
	if k.src == nil {
		return nil
	}
	if err := k.Refresh(ctx); err != nil {
		k.logger.Warn("signing keys not loaded; the platform secret signs until they are", "err", err)
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
