// Package app composes the relay from its parts: the Postgres pool (the
// outbox), the Kafka producer, the LISTEN connection and the relay loop.
// main loads and validates the settings (relay.Config) and hands what New
// returns to daemon.Run.
//
// Start order (stop is the reverse): the connections' closer, then the
// relay. The relay stops first and drains its claimed batch; only then are
// the producer and the pool closed.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/postgres/instances"
	"github.com/sundialhq/sundial/pkg/process/admin"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/kafkaconn"

	"github.com/sundialhq/sundial/services/relay/internal/outbox"
	"github.com/sundialhq/sundial/services/relay/internal/relay"
)

// Deps is what the relay takes from its process rather than its settings.
type Deps struct {
	Logger   *slog.Logger
	Registry prometheus.Registerer
	// Tracer traces publishing; nil: tracing off.
	Tracer trace.Tracer
}

// App is the composed relay.
type App struct {
	// Services are started in order and stopped in reverse (daemon.Run).
	Services []lifecycle.Service
	// Checks are the readiness checks, by name, for the admin server.
	Checks map[string]admin.Check
}

// New builds the relay. Nothing runs until its Services are started; the
// connections it opens are closed by the first service's Stop (the last to
// stop), after the relay has drained.
func New(ctx context.Context, cfg relay.Config, deps Deps) (*App, error) {
	pcfg, err := poolConfig(cfg)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	kc, err := relay.NewProducer(cfg, deps.Logger)
	if err != nil {
		pool.Close()
		return nil, err
	}

	var listener *outbox.Listener
	if cfg.Listen {
		lcfg := pcfg.ConnConfig.Copy()
		lcfg.RuntimeParams["application_name"] = "sundial-relay-listen/" + cfg.NodeID
		listener = &outbox.Listener{Config: lcfg, Logger: deps.Logger, Clock: clock.Real{}}
	}
	r := relay.New(cfg, relay.Deps{
		Outbox:   relay.FromStore(outbox.NewStore(pool)),
		Kafka:    kc,
		Listener: listener,
		Logger:   deps.Logger,
		Clock:    clock.Real{},
		Registry: deps.Registry,
		Tracer:   deps.Tracer,
	})
	checks := map[string]admin.Check{
		"postgres": func(ctx context.Context) error { return pool.Ping(ctx) },
		"kafka":    func(ctx context.Context) error { return kc.Ping(ctx) },
	}
	// The report of this relay and of the Kafka it reaches, for the
	// console without Prometheus: started last, stopped first.
	report := instances.NewReporter(pool, "relay", cfg.NodeID, checks, instances.Options{Logger: deps.Logger.With("component", "instances")})
	return &App{
		Services: []lifecycle.Service{closer{pool: pool, kc: kc, brokers: cfg.Brokers(), logger: deps.Logger}, r, report},
		Checks:   checks,
	}, nil
}

// claimIdleMargin is how much longer than --publish-timeout a claim may sit
// idle in its transaction before Postgres ends the session (poolConfig).
const claimIdleMargin = 2 * time.Second

// poolConfig is the relay's Postgres pool configuration. One connection
// claims, one counts depth, one answers /readyz; the LISTEN connection is
// separate. More would only hold idle sessions.
//
// A claim holds its rows' locks while Kafka acknowledges the batch, and
// the other relays skip locked rows. A relay stalled inside a claim
// (paused, frozen, a long GC) would keep its batch from every relay for as
// long as the stall lasts: Postgres does not notice a silent client. The
// relay itself gives a batch up after --publish-timeout, so its sessions
// are ended when idle in a transaction that long plus claimIdleMargin, and
// the rows go to the next claim (published twice at worst; the workers
// drop the copy). A DSN that sets the parameter wins.
func poolConfig(cfg relay.Config) (*pgxpool.Config, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.PostgresDSN)
	if err != nil {
		return nil, fmt.Errorf("postgres-dsn: %w", err)
	}
	pcfg.MaxConns = 4
	pcfg.ConnConfig.RuntimeParams["application_name"] = "sundial-relay/" + cfg.NodeID
	if _, ok := pcfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !ok {
		pcfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt((cfg.PublishTimeout + claimIdleMargin).Milliseconds(), 10)
	}
	return pcfg, nil
}

// closer owns the connections' lifetime: its Start checks the brokers (a
// wrong SASL password or an untrusted certificate stops the relay at start,
// naming Kafka, where every publish would fail; brokers that are down are
// waited for, as before), and it closes both on Stop.
type closer struct {
	pool    *pgxpool.Pool
	kc      *kgo.Client
	brokers []string
	logger  *slog.Logger
}

func (c closer) Start(ctx context.Context) error {
	return connsec.AtStart(ctx, c.logger, func(ctx context.Context) error { return kafkaconn.Check(ctx, c.kc, c.brokers) })
}

func (c closer) Stop() {
	c.kc.Close()
	c.pool.Close()
}
