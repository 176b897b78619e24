-- +goose Up

-- jobs: the source of truth for what fires when. The full definition lives
-- in spec (a protobuf-encoded sundial.v1.Job); the columns beside it are the
-- ones queries filter, order or lock on.
CREATE TABLE jobs (
    id               uuid        PRIMARY KEY,               -- UUIDv7
    tenant           text        NOT NULL,
    name             text        NOT NULL DEFAULT '',
    labels           jsonb       NOT NULL DEFAULT '{}'::jsonb,
    spec             bytea       NOT NULL,
    priority         smallint    NOT NULL,                  -- sundial.v1.Priority
    status           text        NOT NULL DEFAULT 'active'
                     CHECK (status IN ('active', 'paused', 'deleted', 'completed')),
    version          bigint      NOT NULL DEFAULT 1,        -- bumped on every change
    partition        smallint    NOT NULL CHECK (partition BETWEEN 0 AND 255),
    next_fire_at     timestamptz,                           -- next slot not yet staged; NULL = none left
    last_slot_at     timestamptz,                           -- last slot staged (misfire bookkeeping)
    idempotency_key  text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    deleted_at       timestamptz
);

-- The prefetcher's hot path: active jobs of a partition range by due time.
CREATE INDEX jobs_due ON jobs (partition, next_fire_at) WHERE status = 'active';
CREATE UNIQUE INDEX jobs_tenant_idempotency ON jobs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_tenant_id ON jobs (tenant, id);
CREATE INDEX jobs_labels ON jobs USING gin (labels);

-- outbox: one row per firing attempt waiting to be published to Kafka.
-- Rows are deleted once the broker acknowledged them, so the table stays
-- small; it is a hot insert/delete table (see docs/architecture/relay.md).
CREATE TABLE outbox (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    execution_id  uuid        NOT NULL,
    attempt       integer     NOT NULL CHECK (attempt >= 1),
    job_id        uuid        NOT NULL,
    job_version   bigint      NOT NULL,
    priority      smallint    NOT NULL,
    scheduled_at  timestamptz NOT NULL,
    fire_at       timestamptz NOT NULL,
    publish_at    timestamptz NOT NULL,
    catch_up      boolean     NOT NULL DEFAULT false,
    envelope      bytea       NOT NULL,                     -- protobuf sundial.v1.Firing
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (execution_id, attempt)
);
CREATE INDEX outbox_publish ON outbox (publish_at, id);
CREATE INDEX outbox_job ON outbox (job_id);

-- leader_epochs: the highest ZooKeeper epoch that has written, per election.
-- Every leader transaction raises-or-checks its row, so a deposed leader's
-- transaction fails instead of writing.
CREATE TABLE leader_epochs (
    election    text        PRIMARY KEY,
    epoch       bigint      NOT NULL,
    leader      text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE leader_epochs;
DROP TABLE outbox;
DROP TABLE jobs;
