-- api_tokens: bearer tokens made through the api, each
-- with a role: admin or read-only for its tenant, or operator (the
-- platform's: read-only across tenants, dead-letter re-drive with a
-- tenant named). The static tokens of --tokens/--tokens-file stay as the
-- bootstrap and are not here.
--
-- A token is "sdl_<id>_<secret>": id names its row, so verifying one is a
-- primary-key read and one argon2id check of secret_hash (a PHC string,
-- "$argon2id$v=19$m=...,t=...,p=...$<salt>$<hash>", so the parameters can
-- change for new tokens while old ones still verify). The secret itself
-- is shown once, in the answer to the create, and stored nowhere.
--
-- Tokens are never deleted: a revoked or expired row says who made it,
-- who revoked it and when, and token_audit keeps every change.

-- +goose Up
CREATE TABLE api_tokens (
    id           text        PRIMARY KEY,
    tenant       text        NOT NULL,
    name         text        NOT NULL,
    role         text        NOT NULL CHECK (role IN ('admin', 'read-only', 'operator')),
    secret_hash  text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    created_by   text        NOT NULL,
    expires_at   timestamptz,          -- NULL: never
    revoked_at   timestamptz,
    revoked_by   text,
    last_used_at timestamptz
);

-- ListTokens: a tenant's tokens, newest first.
CREATE INDEX api_tokens_tenant ON api_tokens (tenant, created_at DESC);
-- A name names one token of the tenant at a time (until it is revoked).
CREATE UNIQUE INDEX api_tokens_tenant_name ON api_tokens (tenant, name) WHERE revoked_at IS NULL;
-- The api replicas poll recent revocations (to drop tokens they cached).
CREATE INDEX api_tokens_revoked ON api_tokens (revoked_at) WHERE revoked_at IS NOT NULL;

-- token_audit: every change to a token (create, revoke), written in the
-- change's own transaction: who, when, which token, what.
CREATE TABLE token_audit (
    id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant   text        NOT NULL,
    token_id text        NOT NULL,
    actor    text        NOT NULL,
    action   text        NOT NULL,
    at       timestamptz NOT NULL DEFAULT now(),
    detail   jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX token_audit_tenant ON token_audit (tenant, id DESC);

-- +goose Down
DROP TABLE token_audit;
DROP TABLE api_tokens;
