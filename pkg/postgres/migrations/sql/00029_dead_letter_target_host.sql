-- +goose NO TRANSACTION
-- dead_letters.target_host: where the dead execution's target sends it,
-- as firing.TargetHost derives it (an HTTP URL's host[:port],
-- lower-cased; "kafka <topic>" for a Kafka target; '' for neither), so
-- the console's dead-letter page counts every match by host in the
-- database, without reading an envelope.
--
-- The worker writes it with every dead letter (settle.Postgres). Rows
-- written before — and by a worker of the previous release during a
-- rolling deploy — are NULL: the api's console fills them in from their
-- envelopes in bounded batches with its sweep (console.fillHosts), and
-- its page shows the ones still NULL as one group, "recorded before
-- hosts were stored". A nullable column without a default is a change of
-- the catalogue only: no table rewrite, an exclusive lock held for an
-- instant.
--
-- dead_letters_tenant_host: the grouping by host, an index-only scan of
-- the tenant's range in host order (no sort), the filter's job, class
-- and re-driven conditions answered from the included columns. One more
-- b-tree entry per dead letter written; dead letters are few.
--
-- dead_letters_host_unknown: the rows the fill has still to do, so each
-- sweep finds its batch without reading the table. Empty (and free to
-- maintain) once they are done: new rows are written with their host.
--
-- Built as 00024 builds its indexes: plainly on a small table (under
-- 100,000 estimated rows, or never analysed: a new deployment, each
-- test's schema), then CONCURRENTLY, which finds them there and returns
-- at once, or builds them on a large live table without blocking writes.

-- +goose Up
ALTER TABLE dead_letters ADD COLUMN IF NOT EXISTS target_host text;
-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT reltuples FROM pg_class WHERE oid = 'dead_letters'::regclass) < 100000 THEN
        CREATE INDEX IF NOT EXISTS dead_letters_tenant_host ON dead_letters (tenant, target_host) INCLUDE (job_id, error_class, dead_at, redriven_at);
        CREATE INDEX IF NOT EXISTS dead_letters_host_unknown ON dead_letters (execution_id) WHERE target_host IS NULL;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letters_tenant_host
    ON dead_letters (tenant, target_host) INCLUDE (job_id, error_class, dead_at, redriven_at);
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letters_host_unknown
    ON dead_letters (execution_id) WHERE target_host IS NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS dead_letters_host_unknown;
DROP INDEX CONCURRENTLY IF EXISTS dead_letters_tenant_host;
ALTER TABLE dead_letters DROP COLUMN IF EXISTS target_host;
