-- The merged audit view (pkg/audittrail.List): every change trail of a
-- tenant, newest first by instant, filtered by actor and time. Each trail
-- is read by its own LIMITed scan of (tenant, at, id), or of
-- (tenant, actor, at, id) when the view keeps one actor, so a page reads
-- at most its size from each trail whatever the filters. The per-trail
-- reads keep their (tenant, id) and (tenant, subject, id) indexes.
--
-- The trails stay four tables (pkg/audittrail/DESIGN.md says why); only
-- these indexes are new. Audit rows are written once per change, not
-- per firing, so the two more index entries a row are cheap.

-- +goose Up
CREATE INDEX job_audit_tenant_at ON job_audit (tenant, at DESC, id DESC);
CREATE INDEX job_audit_tenant_actor_at ON job_audit (tenant, actor, at DESC, id DESC);
CREATE INDEX token_audit_tenant_at ON token_audit (tenant, at DESC, id DESC);
CREATE INDEX token_audit_tenant_actor_at ON token_audit (tenant, actor, at DESC, id DESC);
CREATE INDEX signing_key_audit_tenant_at ON signing_key_audit (tenant, at DESC, id DESC);
CREATE INDEX signing_key_audit_tenant_actor_at ON signing_key_audit (tenant, actor, at DESC, id DESC);
CREATE INDEX calendar_audit_tenant_at ON calendar_audit (tenant, at DESC, id DESC);
CREATE INDEX calendar_audit_tenant_actor_at ON calendar_audit (tenant, actor, at DESC, id DESC);

-- +goose Down
DROP INDEX calendar_audit_tenant_actor_at;
DROP INDEX calendar_audit_tenant_at;
DROP INDEX signing_key_audit_tenant_actor_at;
DROP INDEX signing_key_audit_tenant_at;
DROP INDEX token_audit_tenant_actor_at;
DROP INDEX token_audit_tenant_at;
DROP INDEX job_audit_tenant_actor_at;
DROP INDEX job_audit_tenant_at;
