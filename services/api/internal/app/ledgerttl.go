package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/postgres/ledgerttl"
	"github.com/sundialhq/sundial/pkg/process/config"
)

// validateLedgerTTLs reads the ledger TTLs (ledger_ttl) of --quotas-file:
// a bad one is a problem named by the flag. No file: none configured,
// every tenant keeps the ledger's default.
func (s *Config) validateLedgerTTLs(p *config.Problems) {
	s.ledgerTTLs = ledgerttl.TTLs{}
	if s.QuotasFile == "" {
		return
	}
	f, err := quotas.LoadFile(s.QuotasFile)
	if err != nil {
		return // validateQuotas reports it
	}
	ttls, err := ledgerTTLsOf(f)
	if err != nil {
		p.Addf("quotas-file", "%v", err)
		return
	}
	s.ledgerTTLs = ttls
}

// syncLedgerTTLs makes tenant_ledger_ttl hold what the quotas file says,
// in one transaction: the api is the table's one writer, the ledger's
// writers (workers, the prefetcher's drainer) read it every
// ledgerttl.Refresh. Replicas started from the same file write the same
// rows.
func syncLedgerTTLs(ctx context.Context, pool *pgxpool.Pool, ttls ledgerttl.TTLs, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return ledgerttl.Replace(ctx, tx, ttls) })
	if err != nil {
		return fmt.Errorf("ledger TTLs: %w", err)
	}
	def := ttls.For("")
	logger.Info("ledger TTLs configured", "default", def.String(), "tenant_overrides", len(ttls)-btoi(ttls.Has(ledgerttl.Default)))
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ledgerTTLsOf is the TTLs a quotas file configures (ledger_ttl): its
// default's under ledgerttl.Default, when set, and every tenant's own,
// validated, naming the first bad one. A tenant's entry equal to the
// default is kept: the table says which tenants asked for it.
func ledgerTTLsOf(f quotas.File) (ledgerttl.TTLs, error) {
	out := ledgerttl.TTLs{}
	if d := f.Defaults.LedgerTTL; d != nil {
		out[ledgerttl.Default] = *d
	}
	for tenant, o := range f.Tenants {
		if o.LedgerTTL != nil {
			out[tenant] = *o.LedgerTTL
		}
	}
	if err := out.Validate(); err != nil {
		return nil, err
	}
	return out, nil
}
