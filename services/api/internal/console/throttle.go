package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/services/api/internal/tokens"
)

// throttle slows down guessing at the sign-in form.
//
// Failures are counted per source address and per token presented (an
// api-made token by its id, any other by its SHA-256), in Postgres
// (console_signin_throttle) so that every replica behind a load balancer
// counts the same failures: an attacker spreading guesses over replicas
// gains nothing. Once a key has ThrottleAfter failures, sign-ins with it
// are refused (429, Retry-After) until ThrottleBase·2^(failures-after)
// after its last failure, capped at ThrottleMax; a refused attempt is not
// checked and does not count. A key with no failure for throttleWindow
// starts again. A success clears the token's key, not the address's (or
// one valid token would reset the address's count for any number of
// guesses at others).
//
// Counting after the check would let a burst of concurrent guesses all
// pass the check before any failure is counted; so one sign-in per key
// is checked at a time on a replica (enter/leave), and another arriving
// meanwhile is throttled for a second. Across replicas a burst gets at
// most one guess per replica ahead of the count.
//
// Refusals and throttles are written to console_audit, sampled per
// replica: at most auditPerSource rows a minute from one source and
// auditPerMinute in all, the rest counted in metrics only.
type throttle struct {
	pool   *pgxpool.Pool
	clock  clock.Clock
	after  int
	base   time.Duration
	max    time.Duration
	window time.Duration
	m      *metrics

	mu        sync.Mutex
	minute    time.Time
	perSource map[string]int
	total     int
	inFlight  map[string]bool
}

const (
	auditPerSource = 10
	auditPerMinute = 120
	// maxSources bounds perSource; a source past it is audited only
	// within auditPerMinute's spare room.
	maxSources = 10000
	// auditRetention is how long console_audit keeps a row.
	auditRetention = 30 * 24 * time.Hour
)

func newThrottle(pool *pgxpool.Pool, clk clock.Clock, after int, base, max time.Duration, m *metrics) *throttle {
	window := 15 * time.Minute
	if 2*max > window {
		window = 2 * max
	}
	return &throttle{pool: pool, clock: clk, after: after, base: base, max: max, window: window, m: m, perSource: map[string]int{}, inFlight: map[string]bool{}}
}

// attempt is what the throttle knows of one sign-in.
type attempt struct {
	source  string // the address, an IPv6 one by its /64
	tokenID string // an api-made token's id; "" otherwise
	keys    []string
}

func newAttempt(r *http.Request, token string) attempt {
	a := attempt{source: sourceOf(r.RemoteAddr)}
	a.keys = []string{"addr:" + a.source}
	if id, ok := tokenID(token); ok {
		a.tokenID = id
		a.keys = append(a.keys, "token:"+id)
	} else if token != "" {
		sum := sha256.Sum256([]byte(token))
		a.keys = append(a.keys, "hash:"+hex.EncodeToString(sum[:16]))
	}
	return a
}

// sourceOf is the throttle's name for a remote address: the IP, and an
// IPv6 address by its /64 (one host commonly holds the whole /64).
func sourceOf(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// tokenID is the id of an api-made token ("sdl_<16 hex>_<secret>").
func tokenID(token string) (string, bool) {
	rest, ok := strings.CutPrefix(token, tokens.Prefix)
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, "_")
	if !ok || len(id) != 16 {
		return "", false
	}
	if _, err := hex.DecodeString(id); err != nil {
		return "", false
	}
	return id, true
}

// delay is how long a key with n failures refuses after its last one.
func (t *throttle) delay(n int) time.Duration {
	if n < t.after {
		return 0
	}
	d := t.base
	for i := t.after; i < n && d < t.max; i++ {
		d *= 2
	}
	return min(d, t.max)
}

// enter claims the attempt's keys for its check; false when another
// sign-in with one of them is being checked on this replica. The map
// holds only attempts in progress, so it stays as small as they are few.
func (t *throttle) enter(a attempt) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range a.keys {
		if t.inFlight[k] {
			return false
		}
	}
	for _, k := range a.keys {
		t.inFlight[k] = true
	}
	return true
}

// leave releases what enter claimed.
func (t *throttle) leave(a attempt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range a.keys {
		delete(t.inFlight, k)
	}
}

// blocked is how long the attempt must wait; 0 when it may go on.
func (t *throttle) blocked(ctx context.Context, a attempt) (time.Duration, error) {
	now := t.clock.Now()
	rows, err := t.pool.Query(ctx, `SELECT failures, last_failure FROM console_signin_throttle WHERE key = ANY($1) AND last_failure > $2`,
		a.keys, now.Add(-t.window))
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var wait time.Duration
	for rows.Next() {
		var n int
		var last time.Time
		if err := rows.Scan(&n, &last); err != nil {
			return 0, err
		}
		wait = max(wait, last.Add(t.delay(n)).Sub(now))
	}
	return wait, rows.Err()
}

// failed counts a failure against every key of the attempt.
func (t *throttle) failed(ctx context.Context, a attempt) error {
	now := t.clock.Now()
	_, err := t.pool.Exec(ctx, `INSERT INTO console_signin_throttle AS t (key, failures, last_failure)
		SELECT k, 1, $2 FROM unnest($1::text[]) AS k
		ON CONFLICT (key) DO UPDATE SET
			failures = CASE WHEN t.last_failure <= $3 THEN 1 ELSE t.failures + 1 END,
			last_failure = $2`, a.keys, now, now.Add(-t.window))
	return err
}

// succeeded clears the count of the token presented.
func (t *throttle) succeeded(ctx context.Context, a attempt) error {
	if len(a.keys) < 2 {
		return nil
	}
	_, err := t.pool.Exec(ctx, `DELETE FROM console_signin_throttle WHERE key = $1`, a.keys[1])
	return err
}

// audit writes a sign-in event to console_audit when the sampling allows.
func (t *throttle) audit(ctx context.Context, event string, a attempt) error {
	now := t.clock.Now()
	if !t.admit(a.source, now) {
		t.m.auditDropped.Inc()
		return nil
	}
	_, err := t.pool.Exec(ctx, `INSERT INTO console_audit (at, event, source, token_id) VALUES ($1, $2, $3, $4)`,
		now, event, a.source, a.tokenID)
	return err
}

// admit takes one audit row from the source's and the replica's budget
// of the current minute.
func (t *throttle) admit(source string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := now.Truncate(time.Minute); !m.Equal(t.minute) {
		t.minute, t.total = m, 0
		clear(t.perSource)
	}
	if t.total >= auditPerMinute {
		return false
	}
	n, known := t.perSource[source]
	if n >= auditPerSource {
		return false
	}
	if known || len(t.perSource) < maxSources {
		t.perSource[source] = n + 1
	}
	t.total++
	return true
}

// sweep deletes, a bounded batch each, throttle rows past the window and
// audit rows past their retention.
func (t *throttle) sweep(ctx context.Context) error {
	now := t.clock.Now()
	if _, err := t.pool.Exec(ctx, `DELETE FROM console_signin_throttle WHERE key IN (
		SELECT key FROM console_signin_throttle WHERE last_failure <= $1 LIMIT $2)`, now.Add(-t.window), sweepBatch); err != nil {
		return err
	}
	_, err := t.pool.Exec(ctx, `DELETE FROM console_audit WHERE id IN (
		SELECT id FROM console_audit WHERE at <= $1 LIMIT $2)`, now.Add(-auditRetention), sweepBatch)
	return err
}

// metrics are the console's counters.
type metrics struct {
	signIns       *prometheus.CounterVec
	auditDropped  prometheus.Counter
	sessionsEnded *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		signIns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_console_signins_total",
			Help: "Console sign-in attempts, by outcome: ok, refused (an unknown token), throttled (429).",
		}, []string{"outcome"}),
		auditDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_console_signin_audit_dropped_total",
			Help: "Refused or throttled sign-ins not written to console_audit because their source, or the replica, was past its rows a minute.",
		}),
		sessionsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_console_sessions_ended_total",
			Help: "Console sessions ended, by reason: logout, tenant (all of a tenant's, by its admin or an operator), token (its api token no longer resolves), idle, expired (the sweep's).",
		}, []string{"reason"}),
	}
	for _, o := range []string{"ok", "refused", "throttled"} {
		m.signIns.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(m.signIns, m.auditDropped, m.sessionsEnded)
	}
	return m
}
