-- ledger_pending.record: the whole ledger record (a serialized
-- sundial.v1.ExecutionAttempt) of a row a worker spilled because Cassandra
-- did not take it: a fired attempt has fields (fence, HTTP status, timings,
-- response excerpt) the other columns do not carry. NULL for rows written
-- by the api and the prefetcher, which the columns describe in full. Adding
-- a nullable column without a default rewrites nothing.

-- +goose Up
ALTER TABLE ledger_pending ADD COLUMN record bytea;

-- +goose Down
ALTER TABLE ledger_pending DROP COLUMN record;
