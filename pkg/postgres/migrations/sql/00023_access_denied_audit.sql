-- access_denied_audit: calls the api refused before any handler ran:
-- Unauthenticated (no bearer token, or one unknown,
-- revoked or expired) and PermissionDenied (the caller's role may not make
-- the call). Written only by the api's deniedaudit package, in the
-- background and in batches, never on the refused call's path.
--
-- Sampled per caller so a refused caller cannot fill the database: a
-- caller (the principal for PermissionDenied, the source address for
-- Unauthenticated) gets at most a few rows a minute, and the refusals left
-- out are counted on one more row when its minute ends (suppressed > 0:
-- "this many more like this one"). Rows older than the api's retention
-- (30 days by default) are deleted by the same writer.
--
-- Nothing a caller could authenticate with is here: the presented token
-- only as its fingerprint (the first 12 hex digits of its SHA-256, as
-- actors carry it), and the api-token id it claimed.

-- +goose Up
CREATE TABLE access_denied_audit (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL,
    code        text        NOT NULL CHECK (code IN ('Unauthenticated', 'PermissionDenied')),
    method      text        NOT NULL,
    source      text        NOT NULL DEFAULT '',
    tenant      text        NOT NULL DEFAULT '',
    actor       text        NOT NULL DEFAULT '',
    token_id    text        NOT NULL DEFAULT '',
    fingerprint text        NOT NULL DEFAULT '',
    suppressed  bigint      NOT NULL DEFAULT 0 CHECK (suppressed >= 0)
);
-- Reading the trail newest first, and the retention's delete.
CREATE INDEX access_denied_audit_at ON access_denied_audit (at DESC);

-- +goose Down
DROP TABLE access_denied_audit;
