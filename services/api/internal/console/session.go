package console

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/clock"
)

// sessions are the console's sign-ins, kept in Postgres (console_sessions,
// migration 00021) so the server can end one.
//
// The cookie carries a random 256-bit session id and nothing else. The
// row is found by the id's SHA-256; the bearer token the session calls the
// api with is in the row sealed under a key derived from the id. So
// neither the cookie (an opaque id) nor the table (hashes and sealed
// tokens) holds a usable token by itself, and any replica serves any
// session without a shared key.
//
// A session ends when its row goes: at sign-out, when its tenant's admin
// or an operator ends all the tenant's sessions, after IdleTimeout without
// a request or SessionTTL after sign-in, and when the api token it was
// made from stops resolving (revoked, expired, or a static token taken out
// of the configuration). Each replica trusts a row it read for at most
// cacheFor (2 s), so an ended session is refused everywhere within that.
//
// The CSRF token is an HMAC of the session id: bound to the session, no
// storage, and a page of another origin can neither read nor compute it.
type sessions struct {
	pool     *pgxpool.Pool
	clock    clock.Clock
	ttl      time.Duration
	idle     time.Duration
	cacheFor time.Duration

	mu    sync.Mutex
	cache map[[sha256.Size]byte]cachedSession
}

// sessionRow is a session as stored.
type sessionRow struct {
	tenant, actor, tokenID string
	role                   auth.Role
	box                    []byte
	lastSeen, expires      time.Time
}

type cachedSession struct {
	row  sessionRow
	read time.Time
}

const (
	// touchEvery is how stale last_seen may get before a request writes
	// it: idle expiry is exact to this much, and a page load is a write
	// at most once a minute per session.
	touchEvery = time.Minute
	// maxCached bounds the cache; past it, it starts empty again.
	maxCached = 10000
	// sweepBatch bounds each delete of the sweep.
	sweepBatch = 1000
)

// errNoSession is a cookie naming no live session.
var errNoSession = errors.New("console: no such session")

func newSessions(pool *pgxpool.Pool, clk clock.Clock, ttl, idle, cacheFor time.Duration) *sessions {
	return &sessions{pool: pool, clock: clk, ttl: ttl, idle: idle, cacheFor: cacheFor, cache: map[[sha256.Size]byte]cachedSession{}}
}

// newSessionID is a fresh session id: 32 bytes from crypto/rand,
// base64url.
func newSessionID() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// validID reports whether s is shaped like a session id, so a garbage
// cookie costs no query.
func validID(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == 32
}

func idHash(sid string) [sha256.Size]byte { return sha256.Sum256([]byte(sid)) }

// derive is HMAC-SHA256(sid, label): keys that only the cookie's holder
// can compute.
func derive(sid, label string) []byte {
	m := hmac.New(sha256.New, []byte(sid))
	m.Write([]byte(label))
	return m.Sum(nil)
}

func tokenAEAD(sid string) (cipher.AEAD, error) {
	block, err := aes.NewCipher(derive(sid, "sundial console token v2"))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sealToken seals token under the session id's key.
func sealToken(sid, token string) ([]byte, error) {
	aead, err := tokenAEAD(sid)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, []byte(token), nil), nil
}

// openToken opens a sealed token with the session id.
func openToken(sid string, box []byte) (string, bool) {
	aead, err := tokenAEAD(sid)
	if err != nil || len(box) < aead.NonceSize() {
		return "", false
	}
	plain, err := aead.Open(nil, box[:aead.NonceSize()], box[aead.NonceSize():], nil)
	if err != nil {
		return "", false
	}
	return string(plain), true
}

// csrfOf is the CSRF token of the session sid.
func csrfOf(sid string) string {
	return hex.EncodeToString(derive(sid, "sundial console csrf v2")[:16])
}

// checkCSRF reports whether got is the session's CSRF token.
func checkCSRF(sid, got string) bool {
	return got != "" && hmac.Equal([]byte(csrfOf(sid)), []byte(got))
}

// create stores a session for token, which resolved to p, and returns its
// id.
func (s *sessions) create(ctx context.Context, token string, p auth.Principal) (string, error) {
	sid, err := newSessionID()
	if err != nil {
		return "", err
	}
	box, err := sealToken(sid, token)
	if err != nil {
		return "", err
	}
	now := s.clock.Now()
	h := idHash(sid)
	_, err = s.pool.Exec(ctx, `INSERT INTO console_sessions (id_hash, tenant, actor, role, token_id, token_box, created_at, last_seen, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8)`, h[:], p.Tenant, p.Actor, string(p.Role), p.TokenID, box, now, now.Add(s.ttl))
	if err != nil {
		return "", err
	}
	return sid, nil
}

// live reports why row is no longer a session at now ("" while it is).
func (s *sessions) live(row sessionRow, now time.Time) string {
	switch {
	case !now.Before(row.expires):
		return "expired"
	case !now.Before(row.lastSeen.Add(s.idle)):
		return "idle"
	}
	return ""
}

// get returns the live session sid names and its token; errNoSession
// when there is none (reason says why, when the row was there), another
// error when Postgres did not answer.
func (s *sessions) get(ctx context.Context, sid string) (row sessionRow, token, reason string, err error) {
	if !validID(sid) {
		return sessionRow{}, "", "", errNoSession
	}
	h := idHash(sid)
	now := s.clock.Now()
	s.mu.Lock()
	c, ok := s.cache[h]
	s.mu.Unlock()
	if !ok || now.Sub(c.read) >= s.cacheFor || now.Before(c.read) {
		c.row, err = s.read(ctx, h)
		if errors.Is(err, pgx.ErrNoRows) {
			s.forget(h)
			return sessionRow{}, "", "", errNoSession
		}
		if err != nil {
			return sessionRow{}, "", "", err
		}
		c.read = now
		s.remember(h, c)
	}
	if why := s.live(c.row, now); why != "" {
		return sessionRow{}, "", why, errNoSession
	}
	token, ok = openToken(sid, c.row.box)
	if !ok {
		return sessionRow{}, "", "", errNoSession
	}
	if now.Sub(c.row.lastSeen) >= touchEvery {
		if _, err := s.pool.Exec(ctx, `UPDATE console_sessions SET last_seen = $2 WHERE id_hash = $1`, h[:], now); err != nil {
			return sessionRow{}, "", "", err
		}
		c.row.lastSeen = now
		s.remember(h, c)
	}
	return c.row, token, "", nil
}

func (s *sessions) read(ctx context.Context, h [sha256.Size]byte) (sessionRow, error) {
	var r sessionRow
	var role string
	err := s.pool.QueryRow(ctx, `SELECT tenant, actor, role, token_id, token_box, last_seen, expires_at FROM console_sessions WHERE id_hash = $1`, h[:]).
		Scan(&r.tenant, &r.actor, &role, &r.tokenID, &r.box, &r.lastSeen, &r.expires)
	r.role = auth.Role(role)
	return r, err
}

func (s *sessions) remember(h [sha256.Size]byte, c cachedSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cache) >= maxCached {
		clear(s.cache)
	}
	s.cache[h] = c
}

func (s *sessions) forget(h [sha256.Size]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cache, h)
}

// end deletes the session sid.
func (s *sessions) end(ctx context.Context, sid string) error {
	h := idHash(sid)
	s.forget(h)
	_, err := s.pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, h[:])
	return err
}

// endTenant deletes every session of tenant and returns how many.
func (s *sessions) endTenant(ctx context.Context, tenant string) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM console_sessions WHERE tenant = $1`, tenant)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	for h, c := range s.cache {
		if c.row.tenant == tenant {
			delete(s.cache, h)
		}
	}
	s.mu.Unlock()
	return tag.RowsAffected(), nil
}

// count is how many live sessions tenant has.
func (s *sessions) count(ctx context.Context, tenant string) (int64, error) {
	now := s.clock.Now()
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM console_sessions WHERE tenant = $1 AND expires_at > $2 AND last_seen > $3`,
		tenant, now, now.Add(-s.idle)).Scan(&n)
	return n, err
}

// sweep deletes, a bounded batch each, sessions past their absolute or
// idle expiry and sessions of api tokens revoked or expired (which no
// longer resolve, so the sessions are dead already; this frees the rows).
// It returns how many rows went, by reason.
func (s *sessions) sweep(ctx context.Context) (expired, revoked int64, err error) {
	now := s.clock.Now()
	tag, err := s.pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash IN (
		SELECT id_hash FROM console_sessions WHERE expires_at <= $1
		UNION SELECT id_hash FROM console_sessions WHERE last_seen <= $2
		LIMIT $3)`, now, now.Add(-s.idle), sweepBatch)
	if err != nil {
		return 0, 0, err
	}
	expired = tag.RowsAffected()
	// api_tokens is the tokens package's table, read only here.
	tag, err = s.pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash IN (
		SELECT s.id_hash FROM console_sessions s JOIN api_tokens t ON t.id = s.token_id
		WHERE s.token_id <> '' AND (t.revoked_at IS NOT NULL OR t.expires_at <= now())
		LIMIT $1)`, sweepBatch)
	if err != nil {
		return expired, 0, err
	}
	return expired, tag.RowsAffected(), nil
}
