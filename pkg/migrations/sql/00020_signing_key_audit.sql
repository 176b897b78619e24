-- signing_key_audit: every change to a tenant's signing keys (issue 15,
-- item 3: every change audited), written by pkg/signingkey's Store in the
-- change's own transaction, so the trail holds exactly the changes that
-- committed: who (the caller, as the audit trail names callers), which
-- key the change made, what (create, rotate), when (Postgres's clock, as
-- for the key itself) and detail (the overlap's end, the key rotated out,
-- keys ended or removed). Key ids only: a key's secret, sealed or not, is
-- never here.
--
-- A table of its own rather than rows in token_audit: one writer per
-- table (pkg/signingkey writes signing keys and their trail, the api's
-- tokens package tokens and theirs), and a key id is not a token id.
-- Rows are never deleted, unlike signing_keys' rows of long-expired keys.

-- +goose Up
CREATE TABLE signing_key_audit (
    id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant  text        NOT NULL,
    key_id  text        NOT NULL,
    actor   text        NOT NULL,
    action  text        NOT NULL CHECK (action IN ('create', 'rotate')),
    at      timestamptz NOT NULL,
    detail  jsonb       NOT NULL DEFAULT '{}'::jsonb
);
-- ListSigningKeyAudit: a tenant's trail, newest first, paged by id.
CREATE INDEX signing_key_audit_tenant ON signing_key_audit (tenant, id DESC);

-- +goose Down
DROP TABLE signing_key_audit;
