package signingkey

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Key is one signing key of a tenant.
type Key struct {
	Tenant    string
	ID        string
	CreatedAt time.Time
	CreatedBy string
	// ExpiresAt is when a rotated-out key stops being valid; zero for the
	// current key.
	ExpiresAt time.Time
	// PlatformUntil, for a tenant's first key, is until when the
	// platform's secret also signs the tenant's requests (the move from
	// the platform secret to the key); zero: not at all.
	PlatformUntil time.Time
	// Secret is set only where it must be: in what Create and Rotate
	// return (shown once to the tenant) and in what Valid returns (for
	// the workers). Never log it.
	Secret []byte
}

// Current reports whether k is its tenant's current key.
func (k Key) Current() bool { return k.ExpiresAt.IsZero() }

var (
	// ErrExists: Create for a tenant that already has a key.
	ErrExists = errors.New("signingkey: the tenant already has a signing key; rotate it instead")
	// ErrNone: Rotate for a tenant without a key.
	ErrNone = errors.New("signingkey: the tenant has no signing key; create one first")
)

// Store reads and writes signing_keys. Postgres's clock dates every key,
// as it does every scheduling decision.
type Store struct {
	pool *pgxpool.Pool
	kek  *KEK
}

// NewStore returns a store sealing and opening secrets with kek.
func NewStore(pool *pgxpool.Pool, kek *KEK) *Store { return &Store{pool: pool, kek: kek} }

// keep is how long an expired key's row is kept (for List's callers to
// see what was rotated out recently, and for an audit by hand) before a
// later rotation deletes it.
const keep = 30 * 24 * time.Hour

// lockTenant serialises Create and Rotate of one tenant: two concurrent
// rotations would otherwise each find a current key that the other is
// about to retire.
func lockTenant(ctx context.Context, tx pgx.Tx, tenant string) (time.Time, error) {
	var now time.Time
	err := tx.QueryRow(ctx, `SELECT now() FROM (SELECT pg_advisory_xact_lock(hashtextextended('signing_keys/' || $1, 0))) l`, tenant).Scan(&now)
	return now, err
}

func (s *Store) insert(ctx context.Context, tx pgx.Tx, tenant, actor string, now, platformUntil time.Time) (Key, error) {
	id, err := NewKeyID(now)
	if err != nil {
		return Key{}, err
	}
	secret, err := NewSecret()
	if err != nil {
		return Key{}, err
	}
	sealed, err := s.kek.Seal(tenant, id, secret)
	if err != nil {
		return Key{}, err
	}
	var until *time.Time
	if !platformUntil.IsZero() {
		until = &platformUntil
	}
	_, err = tx.Exec(ctx, `INSERT INTO signing_keys (tenant, key_id, sealed, created_at, created_by, platform_until) VALUES ($1, $2, $3, $4, $5, $6)`,
		tenant, id, sealed, now, actor, until)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return Key{}, ErrExists
		}
		return Key{}, fmt.Errorf("signingkey: insert: %w", err)
	}
	return Key{Tenant: tenant, ID: id, CreatedAt: now, CreatedBy: actor, Secret: secret, PlatformUntil: platformUntil}, nil
}

// Create gives tenant its first key, or ErrExists. For platformOverlap
// (zero: not at all) the platform secret keeps signing the tenant's
// requests beside the key, so its targets can move to the key without
// refusing any.
func (s *Store) Create(ctx context.Context, tenant, actor string, platformOverlap time.Duration) (Key, error) {
	if platformOverlap < 0 || platformOverlap > MaxOverlap {
		return Key{}, fmt.Errorf("signingkey: platform overlap %s outside [0, %s]", platformOverlap, MaxOverlap)
	}
	var k Key
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		now, err := lockTenant(ctx, tx, tenant)
		if err != nil {
			return fmt.Errorf("signingkey: lock: %w", err)
		}
		var until time.Time
		if platformOverlap > 0 {
			until = now.Add(platformOverlap)
		}
		k, err = s.insert(ctx, tx, tenant, actor, now, until)
		return err
	})
	return k, err
}

// Rotate makes a new current key for tenant and keeps the previous one
// valid for overlap (zero: not at all). It returns the new key (with its
// secret) and the previous one (without), or ErrNone.
func (s *Store) Rotate(ctx context.Context, tenant, actor string, overlap time.Duration) (cur, prev Key, err error) {
	if overlap < 0 || overlap > MaxOverlap {
		return Key{}, Key{}, fmt.Errorf("signingkey: overlap %s outside [0, %s]", overlap, MaxOverlap)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		now, err := lockTenant(ctx, tx, tenant)
		if err != nil {
			return fmt.Errorf("signingkey: lock: %w", err)
		}
		err = tx.QueryRow(ctx, `SELECT key_id, created_at, created_by FROM signing_keys WHERE tenant = $1 AND expires_at IS NULL`, tenant).
			Scan(&prev.ID, &prev.CreatedAt, &prev.CreatedBy)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNone
		}
		if err != nil {
			return fmt.Errorf("signingkey: current key: %w", err)
		}
		prev.Tenant, prev.ExpiresAt = tenant, now.Add(overlap)
		// At most two valid keys: an earlier overlap still running ends
		// now, and long-expired rows go.
		if _, err := tx.Exec(ctx, `UPDATE signing_keys SET expires_at = $2 WHERE tenant = $1 AND expires_at > $2`, tenant, now); err != nil {
			return fmt.Errorf("signingkey: end the earlier overlap: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM signing_keys WHERE tenant = $1 AND expires_at < $2`, tenant, now.Add(-keep)); err != nil {
			return fmt.Errorf("signingkey: delete expired keys: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE signing_keys SET expires_at = $3 WHERE tenant = $1 AND key_id = $2`, tenant, prev.ID, prev.ExpiresAt); err != nil {
			return fmt.Errorf("signingkey: retire the current key: %w", err)
		}
		cur, err = s.insert(ctx, tx, tenant, actor, now, time.Time{})
		return err
	})
	if err != nil {
		return Key{}, Key{}, err
	}
	return cur, prev, nil
}

// List returns tenant's valid keys, the current first, without secrets.
func (s *Store) List(ctx context.Context, tenant string) ([]Key, error) {
	rows, err := s.pool.Query(ctx, `SELECT key_id, created_at, created_by, expires_at, platform_until FROM signing_keys
		WHERE tenant = $1 AND (expires_at IS NULL OR expires_at > now())
		ORDER BY expires_at DESC NULLS FIRST, created_at DESC`, tenant)
	if err != nil {
		return nil, fmt.Errorf("signingkey: list: %w", err)
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		k := Key{Tenant: tenant}
		var exp, until *time.Time
		if err := rows.Scan(&k.ID, &k.CreatedAt, &k.CreatedBy, &exp, &until); err != nil {
			return nil, fmt.Errorf("signingkey: list: %w", err)
		}
		if exp != nil {
			k.ExpiresAt = *exp
		}
		if until != nil {
			k.PlatformUntil = *until
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("signingkey: list: %w", err)
	}
	return out, nil
}

// Unopened is a valid key Valid could not open (another key-encryption
// key sealed it, or the row was altered): named, never shown.
type Unopened struct{ Tenant, ID string }

// Valid returns every tenant's valid keys with their secrets, the current
// first, and the keys whose secret did not open (skipped). The workers
// call it every few seconds: one query, one row per valid key.
func (s *Store) Valid(ctx context.Context) (map[string][]Key, []Unopened, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant, key_id, sealed, created_at, expires_at, platform_until FROM signing_keys
		WHERE expires_at IS NULL OR expires_at > now()
		ORDER BY tenant, expires_at DESC NULLS FIRST, created_at DESC`)
	if err != nil {
		return nil, nil, fmt.Errorf("signingkey: valid keys: %w", err)
	}
	defer rows.Close()
	out := map[string][]Key{}
	var bad []Unopened
	for rows.Next() {
		var (
			k          Key
			sealed     []byte
			exp, until *time.Time
		)
		if err := rows.Scan(&k.Tenant, &k.ID, &sealed, &k.CreatedAt, &exp, &until); err != nil {
			return nil, nil, fmt.Errorf("signingkey: valid keys: %w", err)
		}
		if exp != nil {
			k.ExpiresAt = *exp
		}
		if until != nil {
			k.PlatformUntil = *until
		}
		if k.Secret, err = s.kek.Open(k.Tenant, k.ID, sealed); err != nil {
			bad = append(bad, Unopened{Tenant: k.Tenant, ID: k.ID})
			continue
		}
		out[k.Tenant] = append(out[k.Tenant], k)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("signingkey: valid keys: %w", err)
	}
	return out, bad, nil
}
