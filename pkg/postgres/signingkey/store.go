package signingkey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
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
	// Secret is set only where it must be: in what Create and Rotate
	// return (shown once to the tenant) and in what Valid and Ensure
	// return (for the workers). Never log it.
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
	// keyed holds the tenants seen with a committed current key: a tenant
	// never loses its current key (a rotation replaces it in one
	// transaction), so EnsureTx need not ask again.
	keyed sync.Map
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

// newRow makes a key for tenant: its id, its secret and the secret sealed.
func (s *Store) newRow(tenant string, now time.Time) (k Key, sealed []byte, err error) {
	if k.ID, err = NewKeyID(now); err != nil {
		return Key{}, nil, err
	}
	if k.Secret, err = NewSecret(); err != nil {
		return Key{}, nil, err
	}
	if sealed, err = s.kek.Seal(tenant, k.ID, k.Secret); err != nil {
		return Key{}, nil, err
	}
	k.Tenant, k.CreatedAt = tenant, now
	return k, sealed, nil
}

func (s *Store) insert(ctx context.Context, tx pgx.Tx, tenant, actor string, now time.Time) (Key, error) {
	k, sealed, err := s.newRow(tenant, now)
	if err != nil {
		return Key{}, err
	}
	_, err = tx.Exec(ctx, `INSERT INTO signing_keys (tenant, key_id, sealed, created_at, created_by) VALUES ($1, $2, $3, $4, $5)`,
		tenant, k.ID, sealed, now, actor)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return Key{}, ErrExists
		}
		return Key{}, fmt.Errorf("signingkey: insert: %w", err)
	}
	k.CreatedBy = actor
	return k, nil
}

// Create gives tenant its first key, or shows the one made for it: the
// api makes a tenant's first key with its first job (EnsureTx), and a
// worker makes one for a tenant with jobs but none (Ensure), without
// showing it; the tenant's first Create returns that key with its secret,
// once. ErrExists when the tenant's current key was shown already.
func (s *Store) Create(ctx context.Context, tenant, actor string) (Key, error) {
	var k Key
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		now, err := lockTenant(ctx, tx, tenant)
		if err != nil {
			return fmt.Errorf("signingkey: lock: %w", err)
		}
		var (
			sealed []byte
			shown  bool
		)
		err = tx.QueryRow(ctx, `SELECT key_id, sealed, created_at, created_by, shown FROM signing_keys WHERE tenant = $1 AND expires_at IS NULL`, tenant).
			Scan(&k.ID, &sealed, &k.CreatedAt, &k.CreatedBy, &shown)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if k, err = s.insert(ctx, tx, tenant, actor, now); err != nil {
				return err
			}
			return insertAudit(ctx, tx, tenant, k.ID, actor, ActionCreate, now, map[string]string{})
		case err != nil:
			return fmt.Errorf("signingkey: current key: %w", err)
		case shown:
			return ErrExists
		}
		k.Tenant = tenant
		if k.Secret, err = s.kek.Open(tenant, k.ID, sealed); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE signing_keys SET shown = true WHERE tenant = $1 AND key_id = $2`, tenant, k.ID); err != nil {
			return fmt.Errorf("signingkey: mark shown: %w", err)
		}
		return insertAudit(ctx, tx, tenant, k.ID, actor, ActionShow, now, map[string]string{"made_by": k.CreatedBy})
	})
	if err != nil {
		return Key{}, err
	}
	return k, nil
}

// EnsureTx makes tenant's first key inside tx unless it has one: the
// api's job creation calls it in the job's own transaction, so a tenant
// has its key from its first job on. The key is not shown (Create shows
// it). Concurrent first jobs of a tenant, on any api replicas, make one
// key: the index allowing one current key per tenant makes the later
// insert wait for the earlier transaction and then do nothing. It reports
// whether it made the key.
func (s *Store) EnsureTx(ctx context.Context, tx pgx.Tx, tenant, actor string) (bool, error) {
	if _, ok := s.keyed.Load(tenant); ok {
		return false, nil
	}
	// A key made earlier in this very transaction is dated with its
	// now(); one dated before was committed by another, and stays.
	var committed bool
	err := tx.QueryRow(ctx, `SELECT created_at < now() FROM signing_keys WHERE tenant = $1 AND expires_at IS NULL`, tenant).Scan(&committed)
	switch {
	case err == nil:
		if committed {
			s.keyed.Store(tenant, true)
		}
		return false, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return false, fmt.Errorf("signingkey: current key: %w", err)
	}
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return false, fmt.Errorf("signingkey: database clock: %w", err)
	}
	k, sealed, err := s.newRow(tenant, now)
	if err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO signing_keys (tenant, key_id, sealed, created_at, created_by, shown) VALUES ($1, $2, $3, $4, $5, false)
		ON CONFLICT (tenant) WHERE expires_at IS NULL DO NOTHING`, tenant, k.ID, sealed, now, actor)
	if err != nil {
		return false, fmt.Errorf("signingkey: insert: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil // another transaction made it first
	}
	return true, insertAudit(ctx, tx, tenant, k.ID, actor, ActionCreate, now, map[string]string{"made_for": "first job"})
}

// Ensure returns tenant's valid keys with their secrets, the current
// first, making its first key (unshown, as EnsureTx does) if it has none:
// a worker asks for a tenant it holds no key of, so a tenant with jobs
// from before per-tenant keys gets its key at its next firing rather
// than being signed for with the platform's secret.
func (s *Store) Ensure(ctx context.Context, tenant, actor string) ([]Key, error) {
	var out []Key
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := s.EnsureTx(ctx, tx, tenant, actor); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT tenant, key_id, sealed, created_at, expires_at FROM signing_keys
			WHERE tenant = $1 AND (expires_at IS NULL OR expires_at > now())
			ORDER BY expires_at DESC NULLS FIRST, created_at DESC`, tenant)
		if err != nil {
			return fmt.Errorf("signingkey: valid keys: %w", err)
		}
		out, _, err = s.collectValid(rows)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(out) > 0 {
		s.keyed.Store(tenant, true)
	}
	return out, nil
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
		if cur, err = s.insert(ctx, tx, tenant, actor, now); err != nil {
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
	// ActionShow: Create showed a key the api or a worker had made for
	// the tenant (its first job, or a firing of a tenant without one).
	ActionShow = "show"
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
	// Detail is what else changed: for a create the api or a worker
	// made, made_for; for show, made_by (who made the key); for rotate the key rotated out and its expiry, and keys the rotation
	// ended or removed. Key ids and times only, never a secret.
	Detail map[string]string
}

func insertAudit(ctx context.Context, tx pgx.Tx, tenant, keyID, actor, action string, at time.Time, detail map[string]string) error {
	if err := audittrail.Append(ctx, tx, audittrail.Record{Kind: audittrail.KindSigningKey, Tenant: tenant, Subject: keyID,
		Actor: actor, Action: action, At: at, Detail: detail}); err != nil {
		return fmt.Errorf("signingkey: %w", err)
	}
	return nil
}

// ListAudit returns up to limit of tenant's audit rows, newest first,
// those before seq (0: from the newest).
func (s *Store) ListAudit(ctx context.Context, tenant string, before int64, limit int) ([]AuditEntry, error) {
	es, err := audittrail.Trail(ctx, s.pool, audittrail.KindSigningKey, tenant, "", before, limit)
	if err != nil {
		return nil, fmt.Errorf("signingkey: list audit: %w", err)
	}
	out := make([]AuditEntry, len(es))
	for i, e := range es {
		out[i] = AuditEntry{Seq: e.Seq, KeyID: e.Subject, Actor: e.Actor, Action: e.Action, At: e.At}
		if err := json.Unmarshal([]byte(e.Detail), &out[i].Detail); err != nil {
			return nil, fmt.Errorf("signingkey: list audit: detail of %d: %w", e.Seq, err)
		}
	}
	return out, nil
}

// List returns tenant's valid keys, the current first, without secrets.
func (s *Store) List(ctx context.Context, tenant string) ([]Key, error) {
	rows, err := s.pool.Query(ctx, `SELECT key_id, created_at, created_by, expires_at FROM signing_keys
		WHERE tenant = $1 AND (expires_at IS NULL OR expires_at > now())
		ORDER BY expires_at DESC NULLS FIRST, created_at DESC`, tenant)
	if err != nil {
		return nil, fmt.Errorf("signingkey: list: %w", err)
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		k := Key{Tenant: tenant}
		var exp *time.Time
		if err := rows.Scan(&k.ID, &k.CreatedAt, &k.CreatedBy, &exp); err != nil {
			return nil, fmt.Errorf("signingkey: list: %w", err)
		}
		if exp != nil {
			k.ExpiresAt = *exp
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
	rows, err := s.pool.Query(ctx, `SELECT tenant, key_id, sealed, created_at, expires_at FROM signing_keys
		WHERE expires_at IS NULL OR expires_at > now()
		ORDER BY tenant, expires_at DESC NULLS FIRST, created_at DESC`)
	if err != nil {
		return nil, nil, fmt.Errorf("signingkey: valid keys: %w", err)
	}
	keys, bad, err := s.collectValid(rows)
	if err != nil {
		return nil, nil, err
	}
	out := map[string][]Key{}
	for _, k := range keys {
		out[k.Tenant] = append(out[k.Tenant], k)
	}
	return out, bad, nil
}

// collectValid opens the secrets of rows (tenant, key_id, sealed,
// created_at, expires_at), skipping and naming those that do not open.
func (s *Store) collectValid(rows pgx.Rows) ([]Key, []Unopened, error) {
	defer rows.Close()
	var (
		out []Key
		bad []Unopened
	)
	for rows.Next() {
		var (
			k      Key
			sealed []byte
			exp    *time.Time
			err    error
		)
		if err := rows.Scan(&k.Tenant, &k.ID, &sealed, &k.CreatedAt, &exp); err != nil {
			return nil, nil, fmt.Errorf("signingkey: valid keys: %w", err)
		}
		if exp != nil {
			k.ExpiresAt = *exp
		}
		if k.Secret, err = s.kek.Open(k.Tenant, k.ID, sealed); err != nil {
			bad = append(bad, Unopened{Tenant: k.Tenant, ID: k.ID})
			continue
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("signingkey: valid keys: %w", err)
	}
	return out, bad, nil
}
