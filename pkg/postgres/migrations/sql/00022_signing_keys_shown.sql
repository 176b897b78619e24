-- signing_keys.shown: whether the key's secret was ever shown to its
-- tenant. The api makes a tenant's first key with its first job, and a
-- worker makes it for a tenant that has jobs but no key, so no tenant is
-- ever signed for with the platform's secret; such a key is unshown until
-- the tenant's CreateSigningKey, which shows it once (audit action
-- "show"). Every key made before this was shown by the Create or Rotate
-- that made it; the constant default rewrites nothing.

-- +goose Up
ALTER TABLE signing_keys ADD COLUMN shown boolean NOT NULL DEFAULT true;
ALTER TABLE signing_key_audit DROP CONSTRAINT signing_key_audit_action_check,
    ADD CONSTRAINT signing_key_audit_action_check CHECK (action IN ('create', 'rotate', 'show'));

-- +goose Down
ALTER TABLE signing_key_audit DROP CONSTRAINT signing_key_audit_action_check,
    ADD CONSTRAINT signing_key_audit_action_check CHECK (action IN ('create', 'rotate'));
ALTER TABLE signing_keys DROP COLUMN shown;
