-- The platform's own numbers without Prometheus: a per-minute
-- rollup of firings, and what each worker is executing now. One writer:
-- the worker's rollup package (services/worker/internal/rollup), which
-- also deletes what is past retention; the api's console reads them.
--
-- firing_minutes: one row per (tenant, minute, priority). Each worker
-- counts in memory and adds its counts every ~10 s with one INSERT ... ON
-- CONFLICT DO UPDATE of all its rows, so rows of many workers merge by
-- addition. The outcome columns and the lateness buckets are
-- pkg/postgres/firingstats's (lateness: one count per bucket bound and one above,
-- at the attempt's start, against its fire instant). A minute is the
-- worker's corrected (database) clock's, when the outcome was counted.
-- Kept 8 days; at 100 tenants × 3 priorities it is 432,000 rows a day.
--
-- worker_running: per worker and tenant, the attempts executing at its
-- last flush. A row not refreshed for 30 s is a worker gone and is not
-- counted; rows an hour old are deleted.

-- +goose Up
CREATE TABLE firing_minutes (
    tenant     text        NOT NULL,
    minute     timestamptz NOT NULL,
    priority   smallint    NOT NULL,
    succeeded  bigint      NOT NULL DEFAULT 0,
    failed     bigint      NOT NULL DEFAULT 0,
    retried    bigint      NOT NULL DEFAULT 0,
    dead       bigint      NOT NULL DEFAULT 0,
    skipped    bigint      NOT NULL DEFAULT 0,
    cancelled  bigint      NOT NULL DEFAULT 0,
    other      bigint      NOT NULL DEFAULT 0,
    lateness   bigint[]    NOT NULL,
    PRIMARY KEY (tenant, minute, priority)
);
-- The platform view (every tenant) and the retention delete read by time.
CREATE INDEX firing_minutes_minute ON firing_minutes (minute);

CREATE TABLE worker_running (
    worker_id  text        NOT NULL,
    tenant     text        NOT NULL,
    running    integer     NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (worker_id, tenant)
);

-- +goose Down
DROP TABLE worker_running;
DROP TABLE firing_minutes;
