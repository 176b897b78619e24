// Package instances is the service_instances table (migration 00031): each
// running service instance's last report of itself — ready or not, and
// what each of its readiness checks answered — so the console shows the
// health of the relays, prefetchers and workers, and of the Kafka and
// ZooKeeper they reach, without Prometheus. The api holds no connection to
// the firing brokers or to ZooKeeper; the services that do report what
// they see.
//
// Every service runs one Reporter, the table's one writer: it runs the
// service's readiness checks (the ones its /readyz runs) every Interval,
// all at once, each within CheckTimeout, and upserts its row with the
// database's clock. A graceful stop marks the row stopped; a row not
// written for Fresh is an instance that died or cannot reach Postgres.
// Rows not written for a day are deleted by whichever reporter starts or
// passes the hour. Read is the console's one read of it.
package instances

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sundialhq/sundial/pkg/process/admin"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// Defaults of Options.
const (
	DefaultInterval     = 10 * time.Second
	DefaultCheckTimeout = 2 * time.Second
	// Fresh is how old a row may be before the console shows the
	// instance as not reporting: three intervals.
	Fresh = 3 * DefaultInterval
	// retention is how long a row not written stays.
	retention = 24 * time.Hour
	// forgetEvery is how often a reporter deletes the rows past retention.
	forgetEvery = time.Hour
	// errorLimit bounds a check's error text in the row.
	errorLimit = 300
)

// Check is one readiness check's answer, as the row holds it.
type Check struct {
	Name  string  `json:"name"`
	OK    bool    `json:"ok"`
	Error string  `json:"error,omitempty"`
	Ms    float64 `json:"ms"` // how long it took
}

// Instance is one row.
type Instance struct {
	Service, Name string
	Started, Seen time.Time
	Ready         bool
	Stopped       bool
	Checks        []Check
}

// DB is the part of a pgx pool the package uses.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Options configures a Reporter. Zero values take the defaults.
type Options struct {
	Interval     time.Duration
	CheckTimeout time.Duration
	Clock        clock.Clock
	Logger       *slog.Logger
}

// Reporter writes one service instance's row. It is a lifecycle.Service.
type Reporter struct {
	db       DB
	service  string
	name     string
	checks   map[string]admin.Check
	opts     Options
	started  time.Time
	lastGone time.Time
	runner   lifecycle.Runner
}

// DefaultName names an instance that has no name of its own: host-pid.
func DefaultName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "host"
	}
	return fmt.Sprintf("%s-%d", h, os.Getpid())
}

// NewReporter returns the reporter of the instance name of service,
// running checks (read at every report, so checks added after this call
// and before Start count; none may be added after Start).
func NewReporter(db DB, service, name string, checks map[string]admin.Check, opts Options) *Reporter {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.CheckTimeout <= 0 {
		opts.CheckTimeout = DefaultCheckTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reporter{db: db, service: service, name: name, checks: checks, opts: opts}
}

// Start reports at once in the background and then every Interval. It
// never fails on Postgres: a report that cannot be written is logged and
// the next one tries again.
func (r *Reporter) Start(context.Context) error {
	r.started = r.opts.Clock.Now()
	return r.runner.Run(r.loop)
}

// Stop ends the reports and marks the row stopped, waiting at most
// CheckTimeout for Postgres.
func (r *Reporter) Stop() {
	r.runner.Stop()
	if r.started.IsZero() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.CheckTimeout)
	defer cancel()
	if _, err := r.db.Exec(ctx, `UPDATE service_instances SET stopped = true, ready = false, seen_at = now()
		WHERE service = $1 AND instance = $2`, r.service, r.name); err != nil {
		r.opts.Logger.Warn("instances: could not mark this instance stopped", "err", err)
	}
}

func (r *Reporter) loop(ctx context.Context) error {
	failing := false
	for {
		err := r.report(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			r.opts.Logger.Warn("instances: could not write this instance's report; trying again", "err", err, "every", r.opts.Interval)
		case err == nil && failing:
			failing = false
			r.opts.Logger.Info("instances: this instance's report written again")
		}
		t := r.opts.Clock.NewTimer(r.opts.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

// report runs the checks and writes the row; once an hour it also deletes
// the rows past retention.
func (r *Reporter) report(ctx context.Context) error {
	checks := Run(ctx, r.checks, r.opts.CheckTimeout, r.opts.Clock)
	ready := true
	for _, c := range checks {
		ready = ready && c.OK
	}
	b, err := json.Marshal(checks)
	if err != nil {
		return err
	}
	if _, err := r.db.Exec(ctx, `INSERT INTO service_instances (service, instance, started_at, seen_at, ready, stopped, checks)
		VALUES ($1, $2, $3, now(), $4, false, $5)
		ON CONFLICT (service, instance) DO UPDATE
		SET started_at = EXCLUDED.started_at, seen_at = now(), ready = EXCLUDED.ready, stopped = false, checks = EXCLUDED.checks`,
		r.service, r.name, r.started, ready, b); err != nil {
		return fmt.Errorf("instances: write: %w", err)
	}
	if now := r.opts.Clock.Now(); now.Sub(r.lastGone) >= forgetEvery {
		if _, err := r.db.Exec(ctx, `DELETE FROM service_instances WHERE seen_at < now() - make_interval(secs => $1)`, retention.Seconds()); err != nil {
			return fmt.Errorf("instances: forget: %w", err)
		}
		r.lastGone = now
	}
	return nil
}

// Run runs checks all at once, each within timeout, and returns their
// answers by name.
func Run(ctx context.Context, checks map[string]admin.Check, timeout time.Duration, clk clock.Clock) []Check {
	out := make([]Check, 0, len(checks))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, check := range checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			t0 := clk.Now()
			err := check(cctx)
			c := Check{Name: name, OK: err == nil, Ms: float64(clk.Now().Sub(t0).Microseconds()) / 1000}
			if err != nil {
				c.Error = truncate(err.Error(), errorLimit)
			}
			mu.Lock()
			out = append(out, c)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b Check) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Read returns every row, by service and instance, at most limit.
func Read(ctx context.Context, db DB, limit int) ([]Instance, error) {
	rows, err := db.Query(ctx, `SELECT service, instance, started_at, seen_at, ready, stopped, checks
		FROM service_instances ORDER BY service, instance LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("service_instances: %w", err)
	}
	defer rows.Close()
	var out []Instance
	for rows.Next() {
		var in Instance
		var raw []byte
		if err := rows.Scan(&in.Service, &in.Name, &in.Started, &in.Seen, &in.Ready, &in.Stopped, &raw); err != nil {
			return nil, fmt.Errorf("service_instances: %w", err)
		}
		if err := json.Unmarshal(raw, &in.Checks); err != nil {
			return nil, errors.Join(fmt.Errorf("service_instances: checks of %s %s", in.Service, in.Name), err)
		}
		out = append(out, in)
	}
	return out, rows.Err()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		n--
	}
	return s[:n] + "…"
}
