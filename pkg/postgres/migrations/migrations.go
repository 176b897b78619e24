// Package migrations holds Sundial's Postgres schema as ordered SQL files
// embedded in the binary and applies them with goose. The api applies them at
// start; `sundial-api migrate` applies them on their own.
//
// Migrations run inside a Postgres advisory lock (goose's session locker), so
// several api replicas starting together apply each migration once.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed sql/*.sql
var files embed.FS

// Up applies every migration not yet applied to the database behind pool,
// in the schema the pool's search_path names.
func Up(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return up(ctx, db, logger)
}

func up(ctx context.Context, db *sql.DB, logger *slog.Logger) error {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migrations: locker: %w", err)
	}
	sub, err := fsSub()
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrations: up: %w", err)
	}
	for _, r := range results {
		logger.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
	}
	return nil
}

// Version is the newest migration applied, 0 when none.
func Version(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	sub, err := fsSub()
	if err != nil {
		return 0, err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub)
	if err != nil {
		return 0, err
	}
	return p.GetDBVersion(ctx)
}

func fsSub() (fs.FS, error) {
	sub, err := fs.Sub(files, "sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return sub, nil
}
