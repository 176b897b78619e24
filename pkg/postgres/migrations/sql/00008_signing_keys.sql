-- signing_keys: each tenant's webhook signing keys. A
-- tenant has one current key (expires_at NULL) and, for the overlap after a
-- rotation, the previous one until expires_at; workers sign with every key
-- still valid, naming each, so a target verifying with either passes.
--
-- sealed is the key's secret encrypted with AES-256-GCM under the
-- operators' key-encryption key (--signing-key-encryption-key-file on the
-- api and the workers; pkg/postgres/signingkey), with the tenant and key id as
-- associated data: a database dump or backup holds no usable key, and a
-- row copied to another tenant or key id does not open.

-- +goose Up
CREATE TABLE signing_keys (
    tenant      text        NOT NULL,
    key_id      text        NOT NULL,
    sealed      bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    created_by  text        NOT NULL,
    expires_at  timestamptz,           -- NULL: the current key
    PRIMARY KEY (tenant, key_id)
);

-- One current key per tenant, whatever two concurrent rotations do.
CREATE UNIQUE INDEX signing_keys_current ON signing_keys (tenant) WHERE expires_at IS NULL;

-- +goose Down
DROP TABLE signing_keys;
