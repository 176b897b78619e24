-- tenant_ledger_ttl: how long each tenant's ledger rows live in Cassandra.
-- Operators set it in the api's --quotas-file (ledger_ttl, in
-- defaults and per tenant); the api writes this table from the file at
-- start, and the ledger's writers (workers, the prefetcher's drainer) read
-- it every minute and write each row USING TTL its tenant's
-- (pkg/postgres/ledgerttl). The row with tenant '' is the default of tenants without
-- a row of their own; with no rows at all every tenant keeps the tables'
-- default of 90 days. The bounds are pkg/store/ledger's MinTTL and MaxTTL.

-- +goose Up
CREATE TABLE tenant_ledger_ttl (
    tenant      text        PRIMARY KEY,
    ttl_seconds integer     NOT NULL CHECK (ttl_seconds BETWEEN 3600 AND 7776000),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE tenant_ledger_ttl;
