// Package deniedaudit writes the calls the api refused before any handler
// ran — Unauthenticated (no token, or one unknown, revoked or expired) and
// PermissionDenied (the role may not make the call) — to Postgres's
// access_denied_audit (migration 00023), the one writer of that table.
//
// A refused caller must not be able to fill the database, nor slow the
// api, by being refused: Record, called by pkg/domain/auth's interceptor on the
// call's goroutine, only takes a mutex and appends to a bounded queue;
// the Recorder's loop writes the queue in batches every FlushInterval.
// Rows are sampled per caller — the principal for PermissionDenied, the
// source address for Unauthenticated (a flood of random tokens from one
// address is one caller) — at most PerCaller rows in a Window, and at most
// Total rows in a Window over all callers. The refusals left out are
// counted, and when the caller's window ends one more row says how many
// ("suppressed"): the trail shows every refused caller and how hard it
// tried, in a bounded number of rows. A full queue, or a write that
// fails, drops rows (counted in sundial_api_access_denied_audit_rows_total
// and logged), never the call. Rows older than Retention are deleted
// hourly.
package deniedaudit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// Defaults of Config.
const (
	DefaultPerCaller     = 10
	DefaultTotal         = 600
	DefaultWindow        = time.Minute
	DefaultFlushInterval = time.Second
	DefaultRetention     = 30 * 24 * time.Hour
	// maxQueue bounds the rows waiting for a write.
	maxQueue = 2000
	// maxCallers bounds the callers tracked within a window; past it,
	// new callers share one entry (overflowCaller), so a flood from
	// many addresses is bounded too.
	maxCallers     = 1000
	overflowCaller = "*"
	pruneEvery     = time.Hour
)

// Config configures a Recorder.
type Config struct {
	Pool     *pgxpool.Pool
	Clock    clock.Clock
	Logger   *slog.Logger
	Registry prometheus.Registerer
	// PerCaller is the rows one caller gets in a Window.
	PerCaller int
	// Total is the rows all callers together get in a Window.
	Total         int
	Window        time.Duration
	FlushInterval time.Duration
	// Retention is how long rows are kept.
	Retention time.Duration
}

// Row is a row of access_denied_audit.
type Row struct {
	At                   time.Time
	Code                 codes.Code
	Method, Source       string
	Tenant, Actor        string
	TokenID, Fingerprint string
	// Suppressed is, on a window's closing row, the refusals of the
	// caller left out of the trail in that window; 0 on the others.
	Suppressed int64
}

type callerState struct {
	start      time.Time
	written    int
	suppressed int64
	last       Row
}

// Recorder is the writer, a lifecycle.Service.
type Recorder struct {
	cfg    Config
	runner lifecycle.Runner
	wake   chan struct{}
	rows   *prometheus.CounterVec

	mu          sync.Mutex
	queue       []Row
	callers     map[string]*callerState
	totalStart  time.Time
	totalInRows int
	lastPrune   time.Time
}

// New returns a Recorder over cfg.Pool.
func New(cfg Config) (*Recorder, error) {
	if cfg.Pool == nil {
		return nil, errors.New("deniedaudit: Config.Pool is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PerCaller <= 0 {
		cfg.PerCaller = DefaultPerCaller
	}
	if cfg.Total <= 0 {
		cfg.Total = DefaultTotal
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	r := &Recorder{cfg: cfg, wake: make(chan struct{}, 1), callers: map[string]*callerState{},
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_api_access_denied_audit_rows_total",
			Help: "Refused calls by what became of their access_denied_audit row: written, suppressed (sampled out; counted on the caller's closing row) or dropped (queue full or write failed).",
		}, []string{"outcome"}),
	}
	for _, o := range []string{"written", "suppressed", "dropped"} {
		r.rows.WithLabelValues(o)
	}
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(r.rows); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// callerKey is who a refusal is sampled as.
func callerKey(ref auth.Refusal) string {
	if ref.Code == codes.PermissionDenied && ref.Principal.Actor != "" {
		return "actor:" + ref.Principal.Actor
	}
	return "source:" + ref.Source
}

// Record queues ref's row, or counts it as suppressed; it never blocks
// on the database. Its signature is auth.Tokens.WithRefusals's.
func (r *Recorder) Record(_ context.Context, ref auth.Refusal) {
	if ref.Code != codes.Unauthenticated && ref.Code != codes.PermissionDenied {
		return
	}
	now := r.cfg.Clock.Now()
	row := Row{At: now, Code: ref.Code, Method: ref.Method, Source: ref.Source, Tenant: ref.Principal.Tenant,
		Actor: ref.Principal.Actor, TokenID: ref.TokenID, Fingerprint: ref.Fingerprint}
	key := callerKey(ref)

	r.mu.Lock()
	if now.Sub(r.totalStart) >= r.cfg.Window {
		r.totalStart, r.totalInRows = now, 0
	}
	st, ok := r.callers[key]
	if ok && now.Sub(st.start) >= r.cfg.Window {
		r.closeWindow(key, st, now)
		ok = false
	}
	if !ok {
		if len(r.callers) >= maxCallers {
			key = overflowCaller
		}
		if st = r.callers[key]; st == nil {
			st = &callerState{start: now}
			r.callers[key] = st
		}
	}
	wake := false
	switch {
	case st.written < r.cfg.PerCaller && r.totalInRows < r.cfg.Total && len(r.queue) < maxQueue:
		st.written++
		r.totalInRows++
		r.queue = append(r.queue, row)
		wake = len(r.queue) >= 100
	default:
		st.suppressed++
		st.last = row
		r.rows.WithLabelValues("suppressed").Inc()
	}
	r.mu.Unlock()
	if wake {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// closeWindows ends the windows that are over. Called with mu held.
func (r *Recorder) closeWindows(now time.Time) {
	if now.Sub(r.totalStart) >= r.cfg.Window {
		r.totalStart, r.totalInRows = now, 0
	}
	for key, st := range r.callers {
		if now.Sub(st.start) >= r.cfg.Window {
			r.closeWindow(key, st, now)
		}
	}
}

// closeWindow forgets a caller whose window is over; one with refusals
// left out gets its closing row. Called with mu held.
func (r *Recorder) closeWindow(key string, st *callerState, now time.Time) {
	if st.suppressed > 0 {
		closing := st.last
		closing.At, closing.Suppressed = now, st.suppressed
		if len(r.queue) < maxQueue {
			r.queue = append(r.queue, closing)
		} else {
			r.rows.WithLabelValues("dropped").Inc()
		}
	}
	delete(r.callers, key)
}

// Flush closes the windows that are over and writes every queued row.
func (r *Recorder) Flush(ctx context.Context) error {
	r.mu.Lock()
	r.closeWindows(r.cfg.Clock.Now())
	rows := r.queue
	r.queue = nil
	r.mu.Unlock()
	if len(rows) == 0 {
		return nil
	}
	_, err := r.cfg.Pool.CopyFrom(ctx, pgx.Identifier{"access_denied_audit"},
		[]string{"at", "code", "method", "source", "tenant", "actor", "token_id", "fingerprint", "suppressed"},
		pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
			w := rows[i]
			return []any{w.At, w.Code.String(), w.Method, w.Source, w.Tenant, w.Actor, w.TokenID, w.Fingerprint, w.Suppressed}, nil
		}))
	if err != nil {
		r.rows.WithLabelValues("dropped").Add(float64(len(rows)))
		return err
	}
	r.rows.WithLabelValues("written").Add(float64(len(rows)))
	return nil
}

// prune deletes the rows older than Retention, at most once an hour.
func (r *Recorder) prune(ctx context.Context) error {
	now := r.cfg.Clock.Now()
	if !r.lastPrune.IsZero() && now.Sub(r.lastPrune) < pruneEvery {
		return nil
	}
	r.lastPrune = now
	_, err := r.cfg.Pool.Exec(ctx, `DELETE FROM access_denied_audit WHERE at < $1`, now.Add(-r.cfg.Retention))
	return err
}

// Start writes the queue every FlushInterval (sooner when it fills)
// until Stop, which writes what is left.
func (r *Recorder) Start(context.Context) error {
	return r.runner.Run(func(ctx context.Context) error {
		t := r.cfg.Clock.NewTimer(r.cfg.FlushInterval)
		defer t.Stop()
		failing := false
		for {
			stopping := false
			select {
			case <-ctx.Done():
				stopping = true
			case <-t.C():
			case <-r.wake:
			}
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			err := r.Flush(wctx)
			if err == nil {
				err = r.prune(wctx)
			}
			cancel()
			switch {
			case err != nil && !failing:
				r.cfg.Logger.Warn("refused calls not written to access_denied_audit; rows are dropped until Postgres answers", "err", err)
				failing = true
			case err == nil && failing:
				r.cfg.Logger.Info("refused calls written to access_denied_audit again")
				failing = false
			}
			if stopping {
				return nil
			}
			t.Reset(r.cfg.FlushInterval)
		}
	})
}

// Stop writes what is queued and ends the loop.
func (r *Recorder) Stop() { r.runner.Stop() }

// Entry is a row of access_denied_audit as read back.
type Entry struct {
	Seq int64
	Row
	CodeName string
}

// List returns up to limit rows, newest first, before seq (0: from the
// newest); only tenant's when tenant is not "".
func List(ctx context.Context, pool *pgxpool.Pool, tenant string, before int64, limit int) ([]Entry, error) {
	q := `SELECT id, at, code, method, source, tenant, actor, token_id, fingerprint, suppressed FROM access_denied_audit WHERE true`
	var args []any
	if tenant != "" {
		args = append(args, tenant)
		q += fmt.Sprintf(` AND tenant = $%d`, len(args))
	}
	if before > 0 {
		args = append(args, before)
		q += fmt.Sprintf(` AND id < $%d`, len(args))
	}
	args = append(args, limit)
	q += fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args))
	rows, err := pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("deniedaudit: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		var e Entry
		err := r.Scan(&e.Seq, &e.At, &e.CodeName, &e.Method, &e.Source, &e.Tenant, &e.Actor, &e.TokenID, &e.Fingerprint, &e.Suppressed)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("deniedaudit: list: %w", err)
	}
	return out, nil
}
