// Command relay is Sundial's relay service: it publishes outbox rows to the
// Kafka firing topics at least once. See docs/architecture/relay.md.
//
// main parses the flags into relay.Config and validates them; package app
// composes the service from them.
package main

import (
	"context"
	"flag"

	"github.com/sundialhq/sundial/pkg/process/daemon"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"

	"github.com/sundialhq/sundial/services/relay/internal/app"
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
			a, err := app.New(ctx, cfg, app.Deps{
				Logger:   env.Logger,
				Registry: env.Registry,
				Tracer:   env.Tracing.Tracer("github.com/sundialhq/sundial/services/relay"),
			})
			if err != nil {
				return nil, err
			}
			for name, check := range a.Checks {
				env.Admin.AddCheck(name, check)
			}
			return a.Services, nil
		},
	)
}
