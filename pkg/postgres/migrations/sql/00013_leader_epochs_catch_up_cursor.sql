-- leader_epochs.catch_up_cursor: where an election's catch-up release
-- schedule runs to (the release instant of its next paced catch-up
-- firing). The prefetcher's range leaders (--ranges) keep it per range, in
-- the range's own row, written in the staging transaction that paced the
-- firings, so a range's next leader queues behind the old one's schedule
-- instead of starting a second at now() (docs/architecture/prefetcher.md,
-- Partitioned prefetch). NULL: nothing paced yet; the single leader does
-- not use it.
--
-- A nullable column without a default rewrites nothing.

-- +goose Up
ALTER TABLE leader_epochs ADD COLUMN catch_up_cursor timestamptz;

-- +goose Down
ALTER TABLE leader_epochs DROP COLUMN catch_up_cursor;
