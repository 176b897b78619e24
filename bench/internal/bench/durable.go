package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// durableSettings are what the local cluster turns off for fast tests and a
// durable-commit benchmark needs on.
var durableSettings = []string{"fsync", "synchronous_commit", "full_page_writes"}

// MakeDurable turns durable commits on in the Postgres cluster at dsn for
// the run: ALTER SYSTEM SET fsync, synchronous_commit and full_page_writes
// to on, reload, and CHECKPOINT (so what was written before is on disk
// too). The cluster is shared, so every client gets durable (slower)
// commits until restore, which puts back what ALTER SYSTEM said before
// (normally nothing: the cluster's own configuration applies again).
func MakeDurable(ctx context.Context, dsn string) (restore func(context.Context) error, err error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	prev := map[string]string{} // settings ALTER SYSTEM had set, and to what
	rows, err := conn.Query(ctx, `SELECT name, setting FROM pg_settings WHERE name = ANY($1) AND sourcefile LIKE '%postgresql.auto.conf'`, durableSettings)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var n, v string
		if err := rows.Scan(&n, &v); err != nil {
			rows.Close()
			return nil, err
		}
		prev[n] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, s := range durableSettings {
		if _, err := conn.Exec(ctx, "ALTER SYSTEM SET "+s+" = on"); err != nil {
			return nil, fmt.Errorf("bench: ALTER SYSTEM SET %s = on: %w", s, err)
		}
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
		for _, s := range durableSettings {
			q := "ALTER SYSTEM RESET " + s
			if v, ok := prev[s]; ok {
				q = "ALTER SYSTEM SET " + s + " = '" + strings.ReplaceAll(v, "'", "''") + "'"
			}
			if _, err := conn.Exec(ctx, q); err != nil {
				return fmt.Errorf("bench: %s: %w", q, err)
			}
		}
		_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
		return err
	}, nil
}
