-- The worker group's consumer lag per priority topic, for the console
-- without Prometheus. Kafka knows it (end offset minus the group's
-- committed offset); the api does not reach the firing brokers, so every
-- worker's lag exporter reads it (package lagexporter) and its rollup
-- writes the figure here with its flush, every ~10 s (package rollup, the
-- table's one writer). Every worker reads the whole group's lag, so rows
-- are per topic and the newest write wins; a row not written for a
-- minute is a group whose workers are gone or cannot read Kafka, and the
-- console says so instead of showing it.

-- +goose Up
CREATE TABLE group_lag (
    topic       text        PRIMARY KEY,
    records     bigint      NOT NULL, -- summed over the topic's partitions
    updated_at  timestamptz NOT NULL, -- the database's clock at the write
    worker_id   text        NOT NULL  -- the worker whose read it is
);

-- +goose Down
DROP TABLE group_lag;
