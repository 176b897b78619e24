-- jobs.idempotency_hash: SHA-256 of the CreateJob request's job (as the
-- client sent it, server-owned fields cleared, deterministic protobuf
-- encoding) that first used jobs.idempotency_key. A create repeating the
-- key with another job is refused instead of answered with this one (issue
-- 17). NULL for jobs created before this migration: their keys cannot be
-- compared and keep replaying the job until they expire.
--
-- Keys expire --idempotency-key-ttl (the api's flag) after the job's
-- created_at; no column records it, the api's lookup compares created_at.
-- A nullable column without a default rewrites nothing.

-- +goose Up
ALTER TABLE jobs ADD COLUMN idempotency_hash bytea;

-- +goose Down
ALTER TABLE jobs DROP COLUMN idempotency_hash;
