-- The web console's server-side state: sessions the server can
-- end, and the sign-in throttle with its audit trail. One writer: the
-- api's console package (services/api/internal/console).
--
-- console_sessions: one row per signed-in browser. The cookie holds only
-- a random 256-bit session id; the row is keyed by its SHA-256, so the
-- table alone opens no session. The bearer token the session makes its
-- calls with is kept sealed (AES-256-GCM) under a key derived from the
-- session id, which is stored nowhere: a copy of this table yields no
-- token either. Deleting the row ends the session on every replica
-- within the console's session cache time (2 s).
--
-- Times are the api's clock (the console's injected clock), so idle and
-- absolute expiry are decided by one clock. Rows past either are removed
-- by the console's sweep, a bounded delete each minute.

-- +goose Up
CREATE TABLE console_sessions (
    id_hash    bytea       PRIMARY KEY,
    tenant     text        NOT NULL,
    actor      text        NOT NULL,
    role       text        NOT NULL,
    token_id   text        NOT NULL DEFAULT '', -- '' for a static token
    token_box  bytea       NOT NULL,
    created_at timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
-- End every session of a tenant; every session of a revoked token.
CREATE INDEX console_sessions_tenant ON console_sessions (tenant);
CREATE INDEX console_sessions_token ON console_sessions (token_id) WHERE token_id <> '';
-- The sweep's two expiries.
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);
CREATE INDEX console_sessions_last_seen ON console_sessions (last_seen);

-- console_signin_throttle: recent sign-in failures per key, where a key
-- is a source address ('addr:<ip>', an IPv6 address by its /64) or the
-- token presented ('token:<id>' for an api-made token, 'hash:<hex>' of
-- the token's SHA-256 otherwise). A key with failures >= 5 refuses
-- sign-ins until last_failure + 1 s * 2^(failures - 5), capped; a key
-- whose last failure is older than the throttle's window starts again.
-- In Postgres so every replica counts the same failures.
CREATE TABLE console_signin_throttle (
    key          text        PRIMARY KEY,
    failures     integer     NOT NULL,
    last_failure timestamptz NOT NULL
);
CREATE INDEX console_signin_throttle_last ON console_signin_throttle (last_failure);

-- console_audit: refused and throttled sign-ins, and the ending of a
-- tenant's sessions by its admin or an operator. Sign-in rows are sampled
-- per source address and per replica (at most 10 a minute from one
-- source, 120 a minute in all; the rest only counted in metrics), so a
-- flood cannot fill Postgres; rows older than 30 days are swept. Never a
-- token: an api-made token's id at most.
CREATE TABLE console_audit (
    id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL,
    event    text        NOT NULL CHECK (event IN ('signin-refused', 'signin-throttled', 'sessions-ended')),
    source   text        NOT NULL,
    token_id text        NOT NULL DEFAULT '',
    tenant   text        NOT NULL DEFAULT '',
    actor    text        NOT NULL DEFAULT '',
    detail   jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX console_audit_at ON console_audit (at);

-- +goose Down
DROP TABLE console_audit;
DROP TABLE console_signin_throttle;
DROP TABLE console_sessions;
