// Command sundial-api is Sundial's api service: the gRPC JobService and
// DeadLetterService, job validation, tenants, quotas and the Postgres
// schema. See docs/architecture/api.md.
//
//	sundial-api [flags]          serve (applies migrations first unless --migrate-on-start=false)
//	sundial-api migrate [flags]  apply the Postgres migrations and the ledger schema, then exit
//	sundial-api dev-tls [flags]  sign loopback certificates with the development CA (make run), then exit
//
// Every flag can also be set as SUNDIAL_<FLAG> (upper case, '-' as '_').
//
// main parses the flags into app.Config and validates them; package app
// composes the service from them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/daemon"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/ledger"

	"github.com/sundialhq/sundial/services/api/internal/app"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "migrate" {
		os.Exit(migrateMain(os.Args[2:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "dev-tls" {
		os.Exit(devTLSMain(os.Args[2:], os.Stdout, os.Stderr, time.Now()))
	}
	var cfg app.Config
	daemon.Main("api",
		func(fs *flag.FlagSet, c *daemon.Common) {
			c.Register(fs, "127.0.0.1:8081")
			cfg.Register(fs)
		},
		cfg.Validate,
		func(ctx context.Context, env daemon.Env) ([]lifecycle.Service, error) {
			a, err := app.New(ctx, cfg, app.Deps{
				Logger:   env.Logger,
				Registry: env.Registry,
				Tracer:   env.Tracing.Tracer("github.com/sundialhq/sundial/services/api"),
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

// migrateMain is `sundial-api migrate`: apply the migrations and exit 0, or
// say why not and exit 1 (2 for bad flags).
func migrateMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("sundial-api migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("postgres-dsn", app.DefaultPostgresDSN, "Postgres connection string (its search_path picks the schema)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	logFormat := fs.String("log-format", "json", "log format: json or text")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long (waiting for another replica's migration lock included)")
	withLedger := fs.Bool("ledger", true, "also create the Cassandra ledger's keyspace and tables")
	cassHosts := fs.String("cassandra-hosts", "127.0.0.1:9042", "comma-separated Cassandra contact points of the execution ledger")
	cassKeyspace := fs.String("cassandra-keyspace", "sundial", "Cassandra keyspace of the execution ledger")
	cassRepl := fs.String("cassandra-replication", ledger.DefaultReplication, "replication map of the ledger keyspace when it is created")
	var cassSec ledger.Security
	cassSec.Register(fs)
	if err := config.Load(fs, args, os.LookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "sundial-api migrate: %v\n", err)
		return 2
	}
	var problems config.Problems
	if *withLedger {
		cassSec.Validate(&problems)
	}
	if err := problems.Err(); err != nil {
		fmt.Fprintf(stderr, "sundial-api migrate: invalid configuration:\n%v\n", err)
		return 2
	}
	logger, err := daemon.NewLogger(stderr, *logFormat, *logLevel, "api")
	if err != nil {
		fmt.Fprintf(stderr, "sundial-api migrate: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := app.Migrate(ctx, app.MigrateConfig{
		PostgresDSN:       *dsn,
		Ledger:            *withLedger,
		CassandraHosts:    *cassHosts,
		CassandraKeyspace: *cassKeyspace,
		CassandraRepl:     *cassRepl,
		CassandraSecurity: cassSec,
	}, logger); err != nil {
		fmt.Fprintf(stderr, "sundial-api migrate: %v\n", err)
		return 1
	}
	return 0
}
