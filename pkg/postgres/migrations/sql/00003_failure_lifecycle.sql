-- +goose Up

-- ledger_pending: ledger rows written in the same transaction as the
-- decision they record (a slot skipped by a misfire policy, a staged firing
-- dropped by pause/update/delete), so a crash can never lose them. The
-- prefetcher leader drains them into the Cassandra ledger and deletes them.
CREATE TABLE ledger_pending (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    execution_id  uuid        NOT NULL,
    job_id        uuid        NOT NULL,
    tenant        text        NOT NULL,
    attempt       integer     NOT NULL DEFAULT 1,
    status        smallint    NOT NULL,                 -- sundial.v1.ExecutionStatus
    scheduled_at  timestamptz NOT NULL,
    fire_at       timestamptz NOT NULL,
    catch_up      boolean     NOT NULL DEFAULT false,
    job_version   bigint      NOT NULL,
    reason        text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- dead_letters: executions that exhausted their attempts or were poison,
-- one row per execution (a re-driven execution that dies again updates its
-- row). The same envelope also goes to the <prefix>.dlq topic; this table is
-- what the DeadLetterService lists, filters and re-drives from.
CREATE TABLE dead_letters (
    execution_id   uuid        PRIMARY KEY,
    tenant         text        NOT NULL,
    job_id         uuid        NOT NULL,
    error_class    text        NOT NULL,
    last_error     text        NOT NULL,
    http_status    integer     NOT NULL DEFAULT 0,
    attempts       integer     NOT NULL,
    last_attempt   integer     NOT NULL,
    envelope       bytea       NOT NULL,                -- protobuf sundial.v1.Firing of the last attempt
    dead_at        timestamptz NOT NULL DEFAULT now(),
    redrive_count  integer     NOT NULL DEFAULT 0,
    redriven_at    timestamptz
);
CREATE INDEX dead_letters_tenant_dead ON dead_letters (tenant, dead_at DESC);
CREATE INDEX dead_letters_tenant_job ON dead_letters (tenant, job_id, dead_at DESC);

-- job_audit: every change to a job, who made it and what changed. Kept when
-- the job itself is purged.
CREATE TABLE job_audit (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id    uuid        NOT NULL,
    tenant    text        NOT NULL,
    actor     text        NOT NULL,
    action    text        NOT NULL,
    version   bigint      NOT NULL,
    at        timestamptz NOT NULL DEFAULT now(),
    detail    jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX job_audit_job ON job_audit (tenant, job_id, id DESC);

-- The create-rate quota counts a tenant's recent creations.
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at);

-- +goose Down
DROP INDEX jobs_tenant_created;
DROP TABLE job_audit;
DROP TABLE dead_letters;
DROP TABLE ledger_pending;
