-- +goose NO TRANSACTION
-- Two reads of the console that no index served:
--
-- jobs_tenant_name_prefix: the dead-letter and execution filters take a
-- job's name as well as its id, read as a prefix ignoring case
-- (lower(name) COLLATE "C" between lower(text) and lower(text) followed
-- by U+10FFFF, at most 21 rows in name order). The trigram index of 00010
-- answers "contains" for three characters or more but not in name order,
-- so a common prefix ("job-") read every match before the LIMIT; this
-- b-tree answers any prefix, one character included, as a range scan of
-- the rows it returns. COLLATE "C" makes the order bytewise, which is
-- what a range over a prefix needs whatever the database's collation.
--
-- Its price: one more b-tree entry for every job inserted and every
-- update that is not HOT. The prefetcher's advance of next_fire_at is
-- already not HOT (next_fire_at is indexed), so it pays one more b-tree
-- insertion, like 00012's and 00014's indexes.
--
-- dead_letters_tenant_class_job: the dead-letter page's groups (by error
-- class and by job, with counts) over everything the filter matches, not
-- the newest 1,000. With redriven_at and dead_at included, both groupings
-- are an index-only scan of the tenant's (or the class's) range, never a
-- read of the envelopes in the heap. Dead letters are written once per
-- dead execution (and per re-drive), so the write cost is small.
--
-- Built as 00010, 00012 and 00014 build theirs: plainly on a small table
-- (under 100,000 estimated rows, or never analysed: a new deployment,
-- each test's schema), then CONCURRENTLY, which finds it there and
-- returns at once, or builds it on a large live table without blocking
-- writes.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT reltuples FROM pg_class WHERE oid = 'jobs'::regclass) < 100000 THEN
        CREATE INDEX IF NOT EXISTS jobs_tenant_name_prefix ON jobs (tenant, (lower(name) COLLATE "C"));
    END IF;
    IF (SELECT reltuples FROM pg_class WHERE oid = 'dead_letters'::regclass) < 100000 THEN
        CREATE INDEX IF NOT EXISTS dead_letters_tenant_class_job ON dead_letters (tenant, error_class, job_id) INCLUDE (dead_at, redriven_at);
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_tenant_name_prefix
    ON jobs (tenant, (lower(name) COLLATE "C"));
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letters_tenant_class_job
    ON dead_letters (tenant, error_class, job_id) INCLUDE (dead_at, redriven_at);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS dead_letters_tenant_class_job;
DROP INDEX CONCURRENTLY IF EXISTS jobs_tenant_name_prefix;
