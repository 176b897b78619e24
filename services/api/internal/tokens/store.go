package tokens

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
)

// Token is a row of api_tokens, without its hash.
type Token struct {
	ID, Tenant, Name string
	Role             auth.Role
	CreatedAt        time.Time
	CreatedBy        string
	ExpiresAt        *time.Time
	RevokedAt        *time.Time
	RevokedBy        string
	LastUsedAt       *time.Time
}

// Active reports whether the token is neither revoked nor expired at now.
func (t Token) Active(now time.Time) bool {
	return t.RevokedAt == nil && (t.ExpiresAt == nil || now.Before(*t.ExpiresAt))
}

// Principal is who the token stands for.
func (t Token) Principal() auth.Principal {
	return auth.Principal{Tenant: t.Tenant, Actor: t.Tenant + "/" + t.Name, Role: t.Role, TokenID: t.ID}
}

// AuditEntry is a row of token_audit.
type AuditEntry struct {
	Seq                    int64
	TokenID, Actor, Action string
	At                     time.Time
	Detail                 map[string]string
}

// Audit actions.
const (
	ActionCreate = "create"
	ActionRevoke = "revoke"
)

// Errors the service maps to codes.
var (
	ErrNotFound   = errors.New("tokens: no such token")
	ErrNameInUse  = errors.New("tokens: the name is in use by a token not revoked")
	errNoSuchHash = errors.New("tokens: no hash")
)

// Store is the one writer of api_tokens and token_audit.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns the store over pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

const tokenColumns = `id, tenant, name, role, created_at, created_by, expires_at, revoked_at, coalesce(revoked_by, ''), last_used_at`

func scanToken(row pgx.Row) (Token, error) {
	var t Token
	var role string
	err := row.Scan(&t.ID, &t.Tenant, &t.Name, &role, &t.CreatedAt, &t.CreatedBy, &t.ExpiresAt, &t.RevokedAt, &t.RevokedBy, &t.LastUsedAt)
	t.Role = auth.Role(role)
	return t, err
}

// Create makes a token for tenant and writes its audit row in the same
// transaction. It returns the row and the token, which is stored nowhere.
func (s *Store) Create(ctx context.Context, tenant, name string, role auth.Role, ttl time.Duration, actor string) (Token, string, error) {
	id, token, err := newToken()
	if err != nil {
		return Token{}, "", err
	}
	_, secret, _ := parseToken(token)
	hash, err := hashSecret(secret)
	if err != nil {
		return Token{}, "", err
	}
	var t Token
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var expires any
		if ttl > 0 {
			expires = ttl.Seconds()
		}
		t, err = scanToken(tx.QueryRow(ctx, `
			INSERT INTO api_tokens (id, tenant, name, role, secret_hash, created_by, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, now() + $7::float8 * interval '1 second')
			RETURNING `+tokenColumns, id, tenant, name, string(role), hash, actor, expires))
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23505" {
				return ErrNameInUse
			}
			return fmt.Errorf("tokens: insert: %w", err)
		}
		detail := map[string]string{"name": name, "role": string(role)}
		if t.ExpiresAt != nil {
			detail["expire_time"] = t.ExpiresAt.UTC().Format(time.RFC3339)
		}
		return insertAudit(ctx, tx, tenant, id, actor, ActionCreate, detail)
	})
	if err != nil {
		return Token{}, "", err
	}
	return t, token, nil
}

func insertAudit(ctx context.Context, tx pgx.Tx, tenant, tokenID, actor, action string, detail map[string]string) error {
	if err := audittrail.Append(ctx, tx, audittrail.Record{Kind: audittrail.KindToken, Tenant: tenant, Subject: tokenID,
		Actor: actor, Action: action, Detail: detail}); err != nil {
		return fmt.Errorf("tokens: %w", err)
	}
	return nil
}

// List returns the tenant's tokens, newest first; active only unless
// inactive.
func (s *Store) List(ctx context.Context, tenant string, inactive bool) ([]Token, error) {
	q := `SELECT ` + tokenColumns + ` FROM api_tokens WHERE tenant = $1`
	if !inactive {
		q += ` AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY created_at DESC, id LIMIT 10000`, tenant)
	if err != nil {
		return nil, fmt.Errorf("tokens: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Token, error) { return scanToken(r) })
	if err != nil {
		return nil, fmt.Errorf("tokens: list: %w", err)
	}
	return out, nil
}

// Get returns the tenant's token id.
func (s *Store) Get(ctx context.Context, tenant, id string) (Token, error) {
	t, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM api_tokens WHERE tenant = $1 AND id = $2`, tenant, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, ErrNotFound
	}
	if err != nil {
		return t, fmt.Errorf("tokens: get: %w", err)
	}
	return t, nil
}

// Revoke revokes the tenant's token id, when allow accepts it, and
// writes the audit row in the same transaction. A revoked token is
// returned as it is, with no new audit row.
func (s *Store) Revoke(ctx context.Context, tenant, id, actor string, allow func(Token) error) (Token, error) {
	var t Token
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		t, err = scanToken(tx.QueryRow(ctx, `SELECT `+tokenColumns+` FROM api_tokens WHERE tenant = $1 AND id = $2 FOR UPDATE`, tenant, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("tokens: revoke: %w", err)
		}
		if err := allow(t); err != nil {
			return err
		}
		if t.RevokedAt != nil {
			return nil
		}
		t, err = scanToken(tx.QueryRow(ctx, `UPDATE api_tokens SET revoked_at = now(), revoked_by = $3
			WHERE tenant = $1 AND id = $2 RETURNING `+tokenColumns, tenant, id, actor))
		if err != nil {
			return fmt.Errorf("tokens: revoke: %w", err)
		}
		return insertAudit(ctx, tx, tenant, id, actor, ActionRevoke, map[string]string{"name": t.Name, "role": string(t.Role)})
	})
	return t, err
}

// ListAudit returns up to limit of the tenant's token audit rows, newest
// first, before seq (0: from the newest).
func (s *Store) ListAudit(ctx context.Context, tenant string, before int64, limit int) ([]AuditEntry, error) {
	es, err := audittrail.Trail(ctx, s.pool, audittrail.KindToken, tenant, "", before, limit)
	if err != nil {
		return nil, fmt.Errorf("tokens: list audit: %w", err)
	}
	out := make([]AuditEntry, len(es))
	for i, e := range es {
		out[i] = AuditEntry{Seq: e.Seq, TokenID: e.Subject, Actor: e.Actor, Action: e.Action, At: e.At}
		if err := json.Unmarshal([]byte(e.Detail), &out[i].Detail); err != nil {
			return nil, fmt.Errorf("tokens: list audit: detail of %d: %w", e.Seq, err)
		}
	}
	return out, nil
}

// lookup returns the token row and hash of id, whatever its tenant.
func (s *Store) lookup(ctx context.Context, id string) (Token, string, error) {
	var hash string
	var t Token
	var role string
	err := s.pool.QueryRow(ctx, `SELECT `+tokenColumns+`, secret_hash FROM api_tokens WHERE id = $1`, id).
		Scan(&t.ID, &t.Tenant, &t.Name, &role, &t.CreatedAt, &t.CreatedBy, &t.ExpiresAt, &t.RevokedAt, &t.RevokedBy, &t.LastUsedAt, &hash)
	t.Role = auth.Role(role)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, "", errNoSuchHash
	}
	return t, hash, err
}

// touch records a use of id, at most once a minute.
func (s *Store) touch(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = now()
		WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')`, id)
	return err
}

// revokedSince returns the ids of tokens revoked within window of the
// database's now.
func (s *Store) revokedSince(ctx context.Context, window time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM api_tokens WHERE revoked_at > now() - $1::float8 * interval '1 second'`, window.Seconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
