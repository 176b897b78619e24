// Command prefetcher is Sundial's prefetcher service: the ZooKeeper-elected
// leader stages every slot due within the window as outbox rows, fenced by
// its election epoch; with --ranges, the job partitions are split into
// ranges spread over every live prefetcher, each range staged by its own
// leader and fenced by its own epoch. See docs/architecture/prefetcher.md.
//
// main parses the flags into app.Config and validates them; package app
// composes the service from them.
package main

import (
	"context"
	"flag"

	"github.com/sundialhq/sundial/pkg/process/daemon"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"

	"github.com/sundialhq/sundial/services/prefetcher/internal/app"
)

func main() {
	var cfg app.Config
	daemon.Main("prefetcher",
		func(fs *flag.FlagSet, c *daemon.Common) {
			c.Register(fs, "127.0.0.1:8082")
			cfg.Register(fs)
		},
		cfg.Validate,
		func(ctx context.Context, env daemon.Env) ([]lifecycle.Service, error) {
			a, err := app.New(ctx, cfg, app.Deps{
				Logger:   env.Logger,
				Registry: env.Registry,
				Tracer:   env.Tracing.Tracer("github.com/sundialhq/sundial/services/prefetcher"),
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
