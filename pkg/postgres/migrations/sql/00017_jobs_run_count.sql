-- jobs.runs_staged and jobs.runs_counted_through: a job's run-count limit
-- (Job.max_runs). The prefetcher counts, in the transaction that
-- stages them (fenced by its leader epoch), the slots of the job's
-- schedule it stages to fire: runs_staged is their number, and
-- runs_counted_through the latest slot counted, so a slot staged again
-- (an update or a pause dropped its unpublished row, and the job was
-- staged again from before it) is not counted twice. A pause or an update
-- that drops staged-ahead rows uncounts them (the api, in the same
-- transaction). Backfills and TriggerJob are not counted. GetJob shows
-- max_runs minus runs_staged as remaining_runs.
--
-- Counting starts with this migration: jobs that ran before it start at 0.
-- A NOT NULL column with a constant default and a nullable one rewrite
-- nothing.

-- +goose Up
ALTER TABLE jobs ADD COLUMN runs_staged bigint NOT NULL DEFAULT 0,
                 ADD COLUMN runs_counted_through timestamptz;

-- +goose Down
ALTER TABLE jobs DROP COLUMN runs_counted_through,
                 DROP COLUMN runs_staged;
