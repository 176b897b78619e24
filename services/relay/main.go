// Command relay is Sundial's relay service: it publishes outbox rows to the
// Kafka firing topics at least once. See docs/architecture/relay.md.
package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/daemon"
	"github.com/sundialhq/sundial/pkg/lifecycle"
	"github.com/sundialhq/sundial/services/relay/internal/outbox"
	"github.com/sundialhq/sundial/services/relay/internal/relay"
)

func main() {
	cfg := relay.Defaults()
	daemon.Main("relay",
		func(fs *flag.FlagSet, c *daemon.Common) {
			c.Register(fs, "127.0.0.1:8083")
			cfg.Register(fs)
		},
		cfg.Validate,
		func(ctx context.Context, env daemon.Env) ([]lifecycle.Service, error) {
			return build(ctx, env, cfg)
		},
	)
}

// build wires the relay. The connections are closed by a service that is
// started first and therefore stopped last, after the relay has drained.
func build(ctx context.Context, env daemon.Env, cfg relay.Config) ([]lifecycle.Service, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.PostgresDSN)
	if err != nil {
		return nil, fmt.Errorf("postgres-dsn: %w", err)
	}
	// One connection claims, one counts depth, one answers /readyz; the
	// LISTEN connection is separate. More would only hold idle sessions.
	pcfg.MaxConns = 4
	pcfg.ConnConfig.RuntimeParams["application_name"] = "sundial-relay/" + cfg.NodeID
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	kc, err := relay.NewProducer(cfg, env.Logger)
	if err != nil {
		pool.Close()
		return nil, err
	}
	env.Admin.AddCheck("postgres", func(ctx context.Context) error { return pool.Ping(ctx) })
	env.Admin.AddCheck("kafka", func(ctx context.Context) error { return kc.Ping(ctx) })

	var listener *outbox.Listener
	if cfg.Listen {
		lcfg := pcfg.ConnConfig.Copy()
		lcfg.RuntimeParams["application_name"] = "sundial-relay-listen/" + cfg.NodeID
		listener = &outbox.Listener{Config: lcfg, Logger: env.Logger, Clock: clock.Real{}}
	}
	r := relay.New(cfg, relay.Deps{
		Outbox:   relay.FromStore(outbox.NewStore(pool)),
		Kafka:    kc,
		Listener: listener,
		Logger:   env.Logger,
		Clock:    clock.Real{},
		Registry: env.Registry,
		Tracer:   env.Tracing.Tracer("github.com/sundialhq/sundial/services/relay"),
	})
	return []lifecycle.Service{closer{pool: pool, kc: kc}, r}, nil
}

// closer owns the connections' lifetime: nothing to start, closes on Stop.
type closer struct {
	pool *pgxpool.Pool
	kc   *kgo.Client
}

func (closer) Start(context.Context) error { return nil }

func (c closer) Stop() {
	c.kc.Close()
	c.pool.Close()
}
