// Command worker is Sundial's worker service; see docs/architecture/worker.md.
package main

import (
	"context"
	"flag"

	"github.com/sundialhq/sundial/pkg/config"
	"github.com/sundialhq/sundial/pkg/daemon"
	"github.com/sundialhq/sundial/pkg/lifecycle"
)

func main() {
	daemon.Main("worker",
		func(fs *flag.FlagSet, c *daemon.Common) { c.Register(fs, "127.0.0.1:8084") },
		func(p *config.Problems) {},
		func(ctx context.Context, env daemon.Env) ([]lifecycle.Service, error) { return nil, nil },
	)
}
