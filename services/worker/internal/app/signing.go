package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/services/worker/internal/signing"
)

// newKeyring builds what signs the worker's requests: each tenant's own
// keys from Postgres, and the platform secret beside them only before
// --platform-signature-until. The keys have a one-connection pool of
// their own: a reload every few seconds must not queue behind the
// settlers' transactions, nor they behind it.
func newKeyring(ctx context.Context, cfg Config, secret []byte, clk clock.Clock, logger *slog.Logger, cl *closer) (*signing.Keyring, error) {
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
	switch until := cfg.PlatformSignatureUntil; {
	case len(secret) > 0 && until.IsZero():
		logger.Warn("the platform's signing secret is given but signs nothing without --platform-signature-until; remove it")
	case !until.IsZero() && clk.Now().Before(until):
		logger.Info("the platform's signing secret signs beside the tenants' keys until the migration ends", "platform_signature_until", until)
	}
	return signing.New(signingkey.NewStore(pool, kek), cfg.SigningKeyRefresh, clk, logger,
		signing.WithPlatformSignature(secret, cfg.PlatformSignatureUntil)), nil
}
