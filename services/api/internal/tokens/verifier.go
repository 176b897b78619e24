package tokens

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// Defaults of VerifierConfig.
const (
	// DefaultPollInterval is how often a replica reads recent revocations.
	DefaultPollInterval = 2 * time.Second
	// DefaultCacheTTL is how long a verified token is trusted without
	// reading its row again (revocations reach it sooner, by the poll).
	DefaultCacheTTL = time.Minute
	// revocationWindow is how far back each poll looks: longer than a
	// cached entry lives plus a poll, so a revocation whose poll failed
	// a few times is still seen, and a cached entry cannot outlive it.
	revocationWindow = 5 * time.Minute
	// negativeTTL is how long a refused token is refused without a look.
	negativeTTL = 10 * time.Second
	maxNegative = 10000
	// maxChecks bounds the argon2id checks running at once.
	maxChecks = 2
)

// RevocationBound is how long after a revocation commits every replica
// refuses the token, with the default poll, while Postgres answers: one
// poll interval and the poll's own time. (While the poll fails, a cached
// token is trusted at most DefaultCacheTTL after it was verified.)
const RevocationBound = DefaultPollInterval + time.Second

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	Store        *Store
	Clock        clock.Clock
	Logger       *slog.Logger
	PollInterval time.Duration
	CacheTTL     time.Duration
}

type entry struct {
	p        auth.Principal
	expires  *time.Time
	verified time.Time
}

// Verifier checks api-made tokens for pkg/domain/auth (auth.Verifier), and is a
// lifecycle.Service whose loop forgets revoked tokens.
type Verifier struct {
	cfg    VerifierConfig
	checks chan struct{}
	runner lifecycle.Runner

	mu   sync.Mutex
	good map[[sha256.Size]byte]entry
	bad  map[[sha256.Size]byte]time.Time
}

// NewVerifier returns a Verifier over cfg.Store.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	if cfg.Store == nil {
		return nil, errors.New("tokens: VerifierConfig.Store is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	return &Verifier{cfg: cfg, checks: make(chan struct{}, maxChecks),
		good: map[[sha256.Size]byte]entry{}, bad: map[[sha256.Size]byte]time.Time{}}, nil
}

// Verify implements auth.Verifier.
func (v *Verifier) Verify(ctx context.Context, token string) (auth.Principal, bool, error) {
	id, secret, ok := parseToken(token)
	if !ok {
		return auth.Principal{}, false, nil
	}
	key := sha256.Sum256([]byte(token))
	now := v.cfg.Clock.Now()
	v.mu.Lock()
	if e, ok := v.good[key]; ok {
		switch {
		case e.expires != nil && !now.Before(*e.expires):
			delete(v.good, key)
			v.mu.Unlock()
			return auth.Principal{}, false, nil
		case now.Sub(e.verified) < v.cfg.CacheTTL:
			v.mu.Unlock()
			return e.p, true, nil
		}
	}
	if until, ok := v.bad[key]; ok && now.Before(until) {
		v.mu.Unlock()
		return auth.Principal{}, false, nil
	}
	v.mu.Unlock()

	t, hash, err := v.cfg.Store.lookup(ctx, id)
	if errors.Is(err, errNoSuchHash) {
		v.refuse(key, now)
		return auth.Principal{}, false, nil
	}
	if err != nil {
		return auth.Principal{}, false, err
	}
	select {
	case v.checks <- struct{}{}:
	case <-ctx.Done():
		return auth.Principal{}, false, ctx.Err()
	}
	match, err := checkSecret(hash, secret)
	<-v.checks
	if err != nil {
		v.cfg.Logger.ErrorContext(ctx, "api token has an unreadable hash", "token_id", id, "err", err)
	}
	if !match || !t.Active(now) {
		v.refuse(key, now)
		return auth.Principal{}, false, nil
	}
	if err := v.cfg.Store.touch(ctx, id); err != nil {
		v.cfg.Logger.WarnContext(ctx, "api token use not recorded", "token_id", id, "err", err)
	}
	p := t.Principal()
	v.mu.Lock()
	v.good[key] = entry{p: p, expires: t.ExpiresAt, verified: now}
	v.mu.Unlock()
	return p, true, nil
}

func (v *Verifier) refuse(key [sha256.Size]byte, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.bad) >= maxNegative {
		clear(v.bad)
	}
	v.bad[key] = now.Add(negativeTTL)
}

// forget drops the cached verifications of the token ids.
func (v *Verifier) forget(ids []string) int {
	if len(ids) == 0 {
		return 0
	}
	gone := make(map[string]bool, len(ids))
	for _, id := range ids {
		gone[id] = true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for k, e := range v.good {
		if gone[e.p.TokenID] {
			delete(v.good, k)
			n++
		}
	}
	return n
}

// Poll reads the recent revocations once and forgets those tokens.
func (v *Verifier) Poll(ctx context.Context) error {
	ids, err := v.cfg.Store.revokedSince(ctx, revocationWindow)
	if err != nil {
		return err
	}
	if n := v.forget(ids); n > 0 {
		v.cfg.Logger.InfoContext(ctx, "revoked api tokens forgotten", "count", n)
	}
	return nil
}

// Start polls revocations every PollInterval until Stop.
func (v *Verifier) Start(context.Context) error {
	return v.runner.Run(func(ctx context.Context) error {
		t := v.cfg.Clock.NewTimer(v.cfg.PollInterval)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C():
			}
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := v.Poll(pctx)
			cancel()
			switch {
			case err != nil && !failing && ctx.Err() == nil:
				v.cfg.Logger.Warn("api token revocations not read; cached tokens are trusted until their cache time ends", "err", err, "cache_ttl", v.cfg.CacheTTL)
				failing = true
			case err == nil && failing:
				v.cfg.Logger.Info("api token revocations read again")
				failing = false
			}
			t.Reset(v.cfg.PollInterval)
		}
	})
}

// Stop ends the poll.
func (v *Verifier) Stop() { v.runner.Stop() }

var _ auth.Verifier = (*Verifier)(nil)

// TokenID implements auth.TokenIDer: the id an api-made token claims, so
// a refused call names it; "" for any other token.
func (v *Verifier) TokenID(token string) string {
	id, _, _ := parseToken(token)
	return id
}
