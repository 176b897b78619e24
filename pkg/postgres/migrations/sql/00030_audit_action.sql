-- +goose NO TRANSACTION
-- The merged audit view's action filter (pkg/postgres/audittrail.List,
-- Query.Action): "every re-drive", "every cancel", "every bulk pause" —
-- each trail read by a LIMITed scan of (tenant, action, at, id), so a page
-- of a rare action reads at most its size from each trail, not every
-- entry of the tenant's trail back to the first one that matches.
--
-- One more b-tree entry per audit row; audit rows are written once per
-- change, not per firing. Built as 00025 builds the view's other indexes:
-- job_audit plainly while small (under 100,000 estimated rows, or never
-- analysed: a new deployment, each test's schema), then CONCURRENTLY,
-- which finds it there and returns at once, or builds it on a large live
-- table without blocking writes; the other trails plainly.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT reltuples FROM pg_class WHERE oid = 'job_audit'::regclass) < 100000 THEN
        CREATE INDEX IF NOT EXISTS job_audit_tenant_action_at ON job_audit (tenant, action, at DESC, id DESC);
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_audit_tenant_action_at ON job_audit (tenant, action, at DESC, id DESC);
CREATE INDEX IF NOT EXISTS token_audit_tenant_action_at ON token_audit (tenant, action, at DESC, id DESC);
CREATE INDEX IF NOT EXISTS signing_key_audit_tenant_action_at ON signing_key_audit (tenant, action, at DESC, id DESC);
CREATE INDEX IF NOT EXISTS calendar_audit_tenant_action_at ON calendar_audit (tenant, action, at DESC, id DESC);

-- +goose Down
DROP INDEX IF EXISTS calendar_audit_tenant_action_at;
DROP INDEX IF EXISTS signing_key_audit_tenant_action_at;
DROP INDEX IF EXISTS token_audit_tenant_action_at;
DROP INDEX CONCURRENTLY IF EXISTS job_audit_tenant_action_at;
