-- +goose NO TRANSACTION
-- jobs_tenant_priority: the jobs list's priority filter, for
-- the priorities a job has only when someone chose it. A page filtered
-- by a rare priority walked the tenant's (tenant, id) index until it
-- filled, and a bulk action's count of it read every job (209 ms at
-- 1,000,000 jobs, about 2 s at 10,000,000: docs/console.md). With this
-- index both read only the rows of that priority, in id order.
--
-- Partial: MEDIUM (3) is every job's default, most jobs have it, and a
-- filter by it fills its pages from (tenant, id) at once; leaving those
-- jobs out means they pay nothing for it. The rest pay one more b-tree
-- entry on insert and on every update that is not HOT (the prefetcher's
-- advance of next_fire_at is not HOT already, next_fire_at being
-- indexed). The api names the priority as a literal in the query, so the
-- planner can prove the index's predicate for any plan, generic or not.
--
-- Built as 00012 builds jobs_tenant_status (plainly on a small table,
-- then CONCURRENTLY, which finds it there; on a large live table
-- CONCURRENTLY builds it while the table keeps taking writes).

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT reltuples FROM pg_class WHERE oid = 'jobs'::regclass) < 100000 THEN
        CREATE INDEX IF NOT EXISTS jobs_tenant_priority ON jobs (tenant, priority, id) WHERE priority <> 3;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_tenant_priority
    ON jobs (tenant, priority, id) WHERE priority <> 3;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobs_tenant_priority;
