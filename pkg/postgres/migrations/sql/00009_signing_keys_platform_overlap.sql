-- signing_keys.platform_until: for a tenant's first key, until when the
-- platform's --signing-secret also signs the tenant's requests (an unnamed
-- v1 beside the key's), so targets that verify with the platform secret
-- can move to the key at any moment within it, none refused. NULL: not at
-- all (keys made by a rotation, or a first key created with no overlap).
-- A nullable column without a default rewrites nothing.

-- +goose Up
ALTER TABLE signing_keys ADD COLUMN platform_until timestamptz;

-- +goose Down
ALTER TABLE signing_keys DROP COLUMN platform_until;
