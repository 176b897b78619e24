// Command api is Sundial's api service; see docs/architecture/api.md.
package main

import (
	"context"
	"flag"

	"github.com/sundialhq/sundial/pkg/config"
	"github.com/sundialhq/sundial/pkg/daemon"
	"github.com/sundialhq/sundial/pkg/lifecycle"
)

func main() {
	daemon.Main("api",
		func(fs *flag.FlagSet, c *daemon.Common) { c.Register(fs, "127.0.0.1:8081") },
		func(p *config.Problems) {},
		func(ctx context.Context, env daemon.Env) ([]lifecycle.Service, error) { return nil, nil },
	)
}
