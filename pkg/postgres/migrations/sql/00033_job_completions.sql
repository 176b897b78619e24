-- job_completions: one-off and run-limited jobs whose last slot settled,
-- waiting to be marked completed. The worker queues a row in the settle
-- stage, where it used to complete the job (before the attempt's markers,
-- so a crash leaves either the row or a redelivery that queues it again),
-- and a paced completer moves queued rows into jobs a batch at a time. A
-- completion is a non-HOT update of jobs (status is in two of its ten
-- indexes, so all ten get an entry) with an audit row and the forecast's
-- change row: in a burst of one-off jobs, the bulk of Postgres's work,
-- which the queue moves past the burst. Rows are not unique: a redelivery
-- queues its job again, and the second completion finds the job completed
-- and does nothing.

-- +goose Up
CREATE TABLE IF NOT EXISTS job_completions (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id    uuid        NOT NULL,
    version   bigint      NOT NULL,
    detail    jsonb       NOT NULL,
    queued_at timestamptz NOT NULL DEFAULT now()
) WITH (
    -- A queue: every row is deleted within seconds of its insert, so
    -- vacuum by the churn, not by the (near empty) table's size.
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0
);

-- +goose Down
DROP TABLE IF EXISTS job_completions;
