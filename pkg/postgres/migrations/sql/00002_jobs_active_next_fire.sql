-- +goose NO TRANSACTION
-- The prefetcher claims the most overdue active jobs across all partitions:
--   WHERE status = 'active' AND next_fire_at <= now() + window
--   ORDER BY next_fire_at LIMIT n FOR UPDATE SKIP LOCKED
-- jobs_due leads with partition, so it cannot return rows in next_fire_at
-- order; without this index Postgres scans and sorts every active job on
-- every tick (measured: Seq Scan + Sort at 20k jobs). Built CONCURRENTLY so
-- adding it to a live jobs table does not block the api's writes. A small
-- table (a new deployment, each test's schema) gets it built plainly first
-- and CONCURRENTLY then returns at once: it waits for every older
-- transaction in the database, which, under the migrations' database-wide
-- lock, let one long transaction anywhere stall every migration (see
-- 00010).

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT reltuples FROM pg_class WHERE oid = 'jobs'::regclass) < 100000 THEN
        CREATE INDEX IF NOT EXISTS jobs_active_next_fire ON jobs (next_fire_at) WHERE status = 'active';
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_active_next_fire
    ON jobs (next_fire_at) WHERE status = 'active';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobs_active_next_fire;
