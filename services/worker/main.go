// Command worker is Sundial's worker service: it consumes firings from the
// priority topics, holds each until its instant by the database clock,
// takes its lease in Redis, calls its target and records the attempt in
// the ledger. See docs/architecture/worker.md.
package main

import (
	"context"
	"flag"
	"os"

	"github.com/sundialhq/sundial/pkg/process/daemon"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"

	"github.com/sundialhq/sundial/services/worker/internal/app"
)

func main() {
	var cfg app.Config
	daemon.Main("worker",
		func(fs *flag.FlagSet, c *daemon.Common) {
			c.Register(fs, "127.0.0.1:8084")
			cfg.Register(fs)
		},
		cfg.Validate,
		func(ctx context.Context, env daemon.Env) ([]lifecycle.Service, error) {
			w, err := app.New(ctx, cfg, app.Deps{Environ: os.Environ(), Tracer: env.Tracing.Tracer("github.com/sundialhq/sundial/services/worker")}, env.Logger, env.Registry)
			if err != nil {
				return nil, err
			}
			for name, check := range w.Checks {
				env.Admin.AddCheck(name, check)
			}
			env.Logger.Info("worker configured", "worker_id", cfg.WorkerID, "group", cfg.Group, "topic_prefix", cfg.TopicPrefix, "executors", cfg.Executors)
			return w.Services, nil
		},
	)
}
