-- +goose NO TRANSACTION
-- jobs_due (partition, next_fire_at) WHERE status = 'active' was meant for
-- per-range leaders that claim the due jobs of a partition range. There
-- are none: the single prefetcher leader claims across all partitions
-- through jobs_active_next_fire (migration 00002), and no query filters on
-- jobs.partition (the api writes the column; nothing reads it). The index
-- was still written on every non-HOT update of a job, i.e. on every
-- advance of next_fire_at. Measured before dropping it: idx_scan = 0 in
-- the steady benchmark and in every test schema, and EXPLAIN of the
-- prefetcher's claim, the api's reads and the retention sweep name other
-- indexes (docs/architecture/prefetcher.md). The partition column stays.
-- Dropped CONCURRENTLY so a live jobs table keeps taking writes.

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS jobs_due;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_due
    ON jobs (partition, next_fire_at) WHERE status = 'active';
