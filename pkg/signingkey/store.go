package signingkey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

// Store reads and writes signing_keys and signing_key_audit (the one
// writer of both). Postgres's clock dates every key,
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
		if k, err = s.insert(ctx, tx, tenant, actor, now, until); err != nil {
			return err
		}
		detail := map[string]string{}
		if !until.IsZero() {
			detail["platform_overlap_end_time"] = until.UTC().Format(time.RFC3339Nano)
		}
		return insertAudit(ctx, tx, tenant, k.ID, actor, ActionCreate, now, detail)
	})
	if err != nil {
		return Key{}, err
	}
	return k, nil
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
		ended, err := keyIDs(tx.Query(ctx, `UPDATE signing_keys SET expires_at = $2 WHERE tenant = $1 AND expires_at > $2 RETURNING key_id`, tenant, now))
		if err != nil {
			return fmt.Errorf("signingkey: end the earlier overlap: %w", err)
		}
		deleted, err := keyIDs(tx.Query(ctx, `DELETE FROM signing_keys WHERE tenant = $1 AND expires_at < $2 RETURNING key_id`, tenant, now.Add(-keep)))
		if err != nil {
			return fmt.Errorf("signingkey: delete expired keys: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE signing_keys SET expires_at = $3 WHERE tenant = $1 AND key_id = $2`, tenant, prev.ID, prev.ExpiresAt); err != nil {
			return fmt.Errorf("signingkey: retire the current key: %w", err)
		}
		if cur, err = s.insert(ctx, tx, tenant, actor, now, time.Time{}); err != nil {
			return err
		}
		detail := map[string]string{"previous_key_id": prev.ID, "previous_expire_time": prev.ExpiresAt.UTC().Format(time.RFC3339Nano)}
		if len(ended) > 0 {
			detail["ended_key_ids"] = strings.Join(ended, ",")
		}
		if len(deleted) > 0 {
			detail["deleted_key_ids"] = strings.Join(deleted, ",")
		}
		return insertAudit(ctx, tx, tenant, cur.ID, actor, ActionRotate, now, detail)
	})
	if err != nil {
		return Key{}, Key{}, err
	}
	return cur, prev, nil
}

func keyIDs(rows pgx.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Audit actions: what a signing_key_audit row records.
const (
	ActionCreate = "create"
	ActionRotate = "rotate"
)

// AuditEntry is a row of signing_key_audit: one change to a tenant's keys.
type AuditEntry struct {
	// Seq orders the trail (and pages it).
	Seq int64
	// KeyID is the key the change made.
	KeyID string
	// Actor is who made the change (auth.ActorFrom).
	Actor  string
	Action string
	At     time.Time
	// Detail is what else changed: for create the platform overlap's end;
	// for rotate the key rotated out and its expiry, and keys the rotation
	// ended or removed. Key ids and times only, never a secret.
	Detail map[string]string
}

func insertAudit(ctx context.Context, tx pgx.Tx, tenant, keyID, actor, action string, at time.Time, detail map[string]string) error {
	b, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("signingkey: encode audit detail: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO signing_key_audit (tenant, key_id, actor, action, at, detail) VALUES ($1, $2, $3, $4, $5, $6)`,
		tenant, keyID, actor, action, at, b); err != nil {
		return fmt.Errorf("signingkey: insert audit row: %w", err)
	}
	return nil
}

// ListAudit returns up to limit of tenant's audit rows, newest first,
// those before seq (0: from the newest).
func (s *Store) ListAudit(ctx context.Context, tenant string, before int64, limit int) ([]AuditEntry, error) {
	q, args := `SELECT id, key_id, actor, action, at, detail FROM signing_key_audit WHERE tenant = $1`, []any{tenant}
	if before > 0 {
		args = append(args, before)
		q += ` AND id < $2`
	}
	args = append(args, limit)
	q += fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("signingkey: list audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		var detail []byte
		if err := r.Scan(&e.Seq, &e.KeyID, &e.Actor, &e.Action, &e.At, &detail); err != nil {
			return e, err
		}
		return e, json.Unmarshal(detail, &e.Detail)
	})
	if err != nil {
		return nil, fmt.Errorf("signingkey: list audit: %w", err)
	}
	return out, nil
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
