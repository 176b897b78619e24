package clockoffset

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres samples the database clock. It keeps one connection (the pool is
// capped at one) so a sample is a single round trip.
type Postgres struct{ pool *pgxpool.Pool }

// NewPostgres connects lazily: the first sample dials.
func NewPostgres(dsn string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("clockoffset: postgres dsn: %w", err)
	}
	cfg.MaxConns = 1
	cfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("clockoffset: postgres pool: %w", err)
	}
	return &Postgres{pool: pool}, nil
}

// ServerTime reads clock_timestamp() (the actual current time, not the
// transaction's start like now(): the same clock, read at the moment).
func (p *Postgres) ServerTime(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := p.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("clockoffset: query postgres clock: %w", err)
	}
	return t, nil
}

// Close closes the connection.
func (p *Postgres) Close() { p.pool.Close() }
