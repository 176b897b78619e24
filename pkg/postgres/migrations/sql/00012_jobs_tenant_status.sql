-- +goose NO TRANSACTION
-- jobs_tenant_status: the jobs list's status filter. The list
-- reads a tenant's jobs in id order (keyset paging) and filtered by status
-- walked the tenant's (tenant, id) index keeping the rows of that status:
-- fast when they are spread through the id order, a walk of every job
-- when the few that match are the newest (a tenant's few active jobs
-- among a million completed one-offs, the jobs paused last night). With
-- (tenant, status, id) each page is a range scan of the rows it returns,
-- whatever the status and wherever they are (docs/console.md).
--
-- Its price: one more b-tree entry for every job inserted and every
-- update that is not HOT. The prefetcher's advance of next_fire_at is
-- already not HOT (next_fire_at is indexed by jobs_active_next_fire), so
-- it pays one more b-tree insertion; pause, resume and delete change
-- status, which that index's predicate already names.
--
-- Built as 00002 and 00010 build theirs: plainly on a small table (under
-- 100,000 estimated rows, or never analysed: a new deployment, each
-- test's schema), then CONCURRENTLY, which finds it there and returns at
-- once; on a large live table CONCURRENTLY builds it while the table
-- keeps taking writes, without waiting on every older transaction in the
-- database under the migrations' lock for a table that did not need it.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT reltuples FROM pg_class WHERE oid = 'jobs'::regclass) < 100000 THEN
        CREATE INDEX IF NOT EXISTS jobs_tenant_status ON jobs (tenant, status, id);
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_tenant_status
    ON jobs (tenant, status, id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobs_tenant_status;
