package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/signingkey"
	"github.com/sundialhq/sundial/services/worker/internal/signing"
)

// newKeyring builds what signs the worker's requests: each tenant's own
// keys from Postgres with --signing-key-encryption-key-file, the platform
// secret for tenants without (and for all, without the flag). The keys
// have a one-connection pool of their own: a reload every few seconds
// must not queue behind the settlers' transactions, nor they behind it.
func newKeyring(ctx context.Context, cfg Config, secret []byte, clk clock.Clock, logger *slog.Logger, cl *closer) (*signing.Keyring, error) {
	if cfg.SigningKEKFile == "" {
		return signing.New(secret, nil, 0, clk, logger), nil
	}
	kek, err := signingkey.LoadKEK(cfg.SigningKEKFile)
	if err != nil {
		return nil, fmt.Errorf("signing-key-encryption-key-file: %w", err)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.PostgresDSN)
	if err != nil {
		return nil, fmt.Errorf("postgres-dsn: %w", err)
	}
	pcfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("signing keys: postgres pool: %w", err)
	}
	cl.add(pool.Close)
	return signing.New(secret, signingkey.NewStore(pool, kek), cfg.SigningKeyRefresh, clk, logger), nil
}
