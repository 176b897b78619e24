package app

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/postgres/migrations"
	"github.com/sundialhq/sundial/pkg/store/ledger"
)

// MigrateConfig is what `sundial-api migrate` applies, from its own flags.
type MigrateConfig struct {
	PostgresDSN string
	// Ledger: also create the Cassandra ledger's keyspace and tables.
	Ledger            bool
	CassandraHosts    string
	CassandraKeyspace string
	CassandraRepl     string
	CassandraSecurity ledger.Security
}

// Migrate applies the Postgres migrations and, with Ledger, creates the
// ledger's keyspace and tables if missing. ctx bounds all of it.
func Migrate(ctx context.Context, cfg MigrateConfig, logger *slog.Logger) error {
	pool, err := pgxpool.New(ctx, cfg.PostgresDSN)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool, logger); err != nil {
		return err
	}
	v, err := migrations.Version(ctx, pool)
	if err != nil {
		return err
	}
	logger.Info("schema is up to date", "version", v)
	if cfg.Ledger {
		if err := migrateLedger(ctx, splitList(cfg.CassandraHosts), cfg.CassandraSecurity, cfg.CassandraKeyspace, cfg.CassandraRepl); err != nil {
			return err
		}
		logger.Info("ledger schema is up to date", "keyspace", cfg.CassandraKeyspace)
	}
	return nil
}

// migrateLedger creates the ledger's keyspace and tables if missing.
func migrateLedger(ctx context.Context, hosts []string, sec ledger.Security, keyspace, replication string) error {
	reach, prepare := ledgerSchema(hosts, sec, keyspace, replication)
	if err := reach(ctx); err != nil {
		return err
	}
	return prepare(ctx)
}
