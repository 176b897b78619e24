-- +goose NO TRANSACTION
-- Two reads of the console that no index served:
--
-- jobs_name_trgm: the jobs list's name search (contains, ignoring case:
-- lower(name) LIKE '%…%', the store escaping % _ \). Without it a search
-- that matches few jobs scanned the tenant's (tenant, id) index until 50
-- rows matched: 2 s at 10,000,000 jobs for one match (docs/console.md).
-- A trigram GIN index answers it from the few posting lists of the text's
-- trigrams; a common text (job-1) still walks (tenant, id), which the
-- planner picks when it expects many matches.
--
-- Its price: every non-HOT update of a job inserts into it. The
-- prefetcher's advance of next_fire_at was already non-HOT (next_fire_at
-- is indexed by jobs_active_next_fire), so the advance pays one more
-- index insertion, into GIN's pending list (fastupdate); measured in
-- docs/console.md. Name being unchanged does not make the update HOT.
--
-- pg_trgm ships with Debian's postgresql-15 (contrib is in the server
-- package) and is a trusted extension: a database owner without superuser
-- may create it. It is created in schema public and the operator class is
-- named there, because extensions are per database while Sundial's schema
-- follows search_path (the tests give each test its own): an extension
-- created in a test's schema would vanish with that schema.
--
-- job_audit_tenant: the tenant-wide audit trail (newest first, ListJobAudit
-- without a job) walked the table's primary key backwards keeping the
-- tenant's rows, so a quiet tenant's page read every other tenant's
-- recent changes. (tenant, id) gives it its own range, read backwards.
--
-- Both built CONCURRENTLY so a live table keeps taking writes — on a
-- table of any size. A small one (under 100,000 estimated rows, or never
-- analysed: a new deployment, each test's schema) gets them built plainly
-- first, and the CONCURRENTLY statements then find them and return at
-- once: CONCURRENTLY waits for every transaction in the database older
-- than it, and with the migrations' database-wide lock held, one long
-- transaction anywhere (another schema's test, a tool left idle in a
-- transaction) stalled every migration behind it for minutes.

-- +goose Up
CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public;
-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT reltuples FROM pg_class WHERE oid = 'jobs'::regclass) < 100000
       AND (SELECT reltuples FROM pg_class WHERE oid = 'job_audit'::regclass) < 100000 THEN
        CREATE INDEX IF NOT EXISTS jobs_name_trgm ON jobs USING gin (lower(name) public.gin_trgm_ops);
        CREATE INDEX IF NOT EXISTS job_audit_tenant ON job_audit (tenant, id);
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_name_trgm
    ON jobs USING gin (lower(name) public.gin_trgm_ops);
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_audit_tenant
    ON job_audit (tenant, id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS job_audit_tenant;
DROP INDEX CONCURRENTLY IF EXISTS jobs_name_trgm;
