-- +goose NO TRANSACTION
-- The merged audit view (pkg/postgres/audittrail.List): every change trail of a
-- tenant, newest first by instant, filtered by actor and time. Each trail
-- is read by its own LIMITed scan of (tenant, at, id), or of
-- (tenant, actor, at, id) when the view keeps one actor, so a page reads
-- at most its size from each trail whatever the filters. The per-trail
-- reads keep their (tenant, id) and (tenant, subject, id) indexes.
--
-- The trails stay four tables (pkg/postgres/audittrail/DESIGN.md says why); only
-- these indexes are new. Audit rows are written once per change, not
-- per firing, so the two more index entries a row are cheap.
--
-- job_audit can be large (an entry for every job completed or purged):
-- its two are built CONCURRENTLY so the table keeps taking writes, and
-- built plainly first when it is small (under 100,000 estimated rows, or
-- never analysed: a new deployment, each test's schema), for the reason
-- 00010 gives (CONCURRENTLY waits for every older transaction in the
-- database). The other trails hold a row per token, key or calendar
-- change and are built plainly.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT reltuples FROM pg_class WHERE oid = 'job_audit'::regclass) < 100000 THEN
        CREATE INDEX IF NOT EXISTS job_audit_tenant_at ON job_audit (tenant, at DESC, id DESC);
        CREATE INDEX IF NOT EXISTS job_audit_tenant_actor_at ON job_audit (tenant, actor, at DESC, id DESC);
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_audit_tenant_at ON job_audit (tenant, at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_audit_tenant_actor_at ON job_audit (tenant, actor, at DESC, id DESC);
CREATE INDEX IF NOT EXISTS token_audit_tenant_at ON token_audit (tenant, at DESC, id DESC);
CREATE INDEX IF NOT EXISTS token_audit_tenant_actor_at ON token_audit (tenant, actor, at DESC, id DESC);
CREATE INDEX IF NOT EXISTS signing_key_audit_tenant_at ON signing_key_audit (tenant, at DESC, id DESC);
CREATE INDEX IF NOT EXISTS signing_key_audit_tenant_actor_at ON signing_key_audit (tenant, actor, at DESC, id DESC);
CREATE INDEX IF NOT EXISTS calendar_audit_tenant_at ON calendar_audit (tenant, at DESC, id DESC);
CREATE INDEX IF NOT EXISTS calendar_audit_tenant_actor_at ON calendar_audit (tenant, actor, at DESC, id DESC);

-- +goose Down
DROP INDEX IF EXISTS calendar_audit_tenant_actor_at;
DROP INDEX IF EXISTS calendar_audit_tenant_at;
DROP INDEX IF EXISTS signing_key_audit_tenant_actor_at;
DROP INDEX IF EXISTS signing_key_audit_tenant_at;
DROP INDEX IF EXISTS token_audit_tenant_actor_at;
DROP INDEX IF EXISTS token_audit_tenant_at;
DROP INDEX CONCURRENTLY IF EXISTS job_audit_tenant_actor_at;
DROP INDEX CONCURRENTLY IF EXISTS job_audit_tenant_at;
