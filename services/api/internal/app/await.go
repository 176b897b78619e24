package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/ledger"
)

// awaitRetry spaces the attempts to reach a store that did not answer at
// start: often enough that the api serves within seconds of the store's
// return, rarely enough that a long outage costs nothing.
const awaitRetry = 2 * time.Second

// awaited is a store the api prepares before serving what needs it (the
// Postgres schema and ledger TTLs, the ledger's Cassandra schema). When the
// store answers at start it is prepared there, as it always was, and a
// failure stops the api; when it refuses the api's settings the api stops
// too, naming it (connsec.AtStart); when it does not answer the api starts
// anyway and the awaited's goroutine tries again every awaitRetry until the
// store answers and is prepared. Meanwhile Ready says what it waits for,
// for /readyz and for the calls that need the store.
type awaited struct {
	name string
	// reach checks the store answers, bounded by connsec.StartupTimeout; a
	// refusal of the api's settings is marked connsec.ErrRefused.
	reach func(ctx context.Context) error
	// prepare migrates once the store answers; at start it is bounded only
	// by the start's context, since a migration may wait for another
	// replica's lock.
	prepare func(ctx context.Context) error
	logger  *slog.Logger
	clock   clock.Clock
	every   time.Duration

	runner lifecycle.Runner

	mu      sync.Mutex
	done    bool
	lastErr error
}

func newAwaited(name string, reach, prepare func(context.Context) error, logger *slog.Logger) *awaited {
	return &awaited{name: name, reach: reach, prepare: prepare, logger: logger, clock: clock.Real{}, every: awaitRetry,
		lastErr: errors.New("not tried yet")}
}

// atStart is the first attempt, made while the api is composed: nil when
// the store is prepared or does not answer (then Start waits for it), the
// error when it refuses the settings or fails to prepare.
func (a *awaited) atStart(ctx context.Context) error {
	var reachErr error
	if err := connsec.AtStart(ctx, a.logger, func(ctx context.Context) error {
		reachErr = a.reach(ctx)
		return reachErr
	}); err != nil {
		return err
	}
	if reachErr != nil {
		a.set(false, reachErr)
		return nil
	}
	if err := a.prepare(ctx); err != nil {
		return err
	}
	a.set(true, nil)
	return nil
}

// Start waits for the store in the background when atStart did not find
// it; it never blocks.
func (a *awaited) Start(context.Context) error {
	if a.Ready(context.Background()) == nil {
		return nil
	}
	return a.runner.Run(a.await)
}

// Stop ends the waiting; what the store's clients hold is closed by their
// own owners.
func (a *awaited) Stop() { a.runner.Stop() }

// await tries until the store answers and is prepared. A refusal or a
// failed migration met here is logged and waited out like silence: the
// api is up already, and /readyz names the store.
func (a *awaited) await(ctx context.Context) error {
	for {
		t := a.clock.NewTimer(a.every)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		rctx, cancel := context.WithTimeout(ctx, connsec.StartupTimeout)
		err := a.reach(rctx)
		cancel()
		if err == nil {
			if err = a.prepare(ctx); err != nil {
				a.logger.Error(a.name+" answers but could not be prepared; trying again", "err", err, "retry_every", a.every)
			}
		} else if errors.Is(err, connsec.ErrRefused) {
			a.logger.Error(a.name+" refuses the api's settings; waiting for them to be mended", "err", err)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			a.logger.Info(a.name + " answers: prepared, serving what needs it")
			a.set(true, nil)
			return nil
		}
		a.set(false, err)
	}
}

func (a *awaited) set(done bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.done, a.lastErr = done, err
}

// Ready is nil once the store answered and is prepared; before, it says
// the api waits for the store, and why.
func (a *awaited) Ready(context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		return nil
	}
	return fmt.Errorf("waiting for %s: %w", a.name, a.lastErr)
}

// pingPostgres is the api's startup check of its pool: one connection and
// a ping. The error names Postgres; a refusal — a wrong password, a user
// pg_hba.conf rejects (without TLS, say: "no encryption"), a certificate
// the CA bundle does not cover — is marked connsec.ErrRefused, since no
// retry mends it.
func pingPostgres(ctx context.Context, pool *pgxpool.Pool) error {
	err := pool.Ping(ctx)
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	// Class 28 is "invalid authorization specification".
	if connsec.IsTLSRefusal(err) || (errors.As(err, &pgErr) && len(pgErr.Code) == 5 && pgErr.Code[:2] == "28") {
		err = connsec.Refused(err)
	}
	return fmt.Errorf("postgres: %w", err)
}

// ledgerSchema is the reach and prepare steps of the ledger's Cassandra
// schema: reach opens a session, prepare makes the keyspace and tables on
// it and closes it (one session per attempt: a session closed at once,
// before its pool filled, leaves gocql reconnecting for a while).
// Cassandra's refusals are not told apart from silence here: the workers
// wait for both (ledger.LazySession), and so does the api. The steps run
// one at a time, in the awaited's attempts, so sess needs no lock.
func ledgerSchema(hosts []string, sec ledger.Security, keyspace, replication string) (reach, prepare func(context.Context) error) {
	var sess ledger.Session
	reach = func(context.Context) error {
		// Creating a table can outlast a write's 5 s on a busy node.
		cc := ledger.ConnectConfig{Hosts: hosts, Timeout: 30 * time.Second}
		if err := sec.Apply(&cc); err != nil {
			return fmt.Errorf("cassandra: %w", err)
		}
		s, err := ledger.Connect(cc)
		if err != nil {
			return err
		}
		sess = s
		return nil
	}
	prepare = func(ctx context.Context) error {
		defer sess.Close()
		return ledger.Migrate(ctx, sess, keyspace, replication)
	}
	return reach, prepare
}
