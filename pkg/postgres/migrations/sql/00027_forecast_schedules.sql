-- +goose NO TRANSACTION
-- The forecast's count of jobs per distinct schedule (docs/forecast.md "How
-- it is computed"). The forecast needs of a
-- job only its schedule, its jitter, its tenant and priority and whether
-- it is active; jobs sharing all of these count alike. Instead of reading
-- every job's spec on each forecast (4 µs a job), the api reads
-- forecast_schedules: one row per (tenant, status, priority, schedule
-- key) with how many jobs have it.
--
-- A schedule key is the spec's encoded sundial.v1.Schedule (field 5 of
-- the stored sundial.v1.Job) and its max_jitter (field 13), plus what
-- else decides a job's instants: the creation second (anchor) when an
-- interval or recurrence rule without start_time counts from it, and the
-- job's id (job_id) when a cron has H, whose values are hashed from the
-- id — such a job is a key of its own, so H stays exact per job. digest
-- is the SHA-256 of those parts, the key's identity.
--
-- Who keeps it: every write of jobs. Three packages change which jobs are
-- live (the api's store; pkg/postgres/jobcompletion, from the worker and the api's
-- resume; the prefetcher's retention), so the count is kept by triggers
-- on jobs, in the writing transaction. A trigger does not update the
-- count row (that would serialise every writer of a popular schedule on
-- one row, and two bulk actions touching two schedules in opposite
-- orders could deadlock): it appends a change (+n or -n) to
-- forecast_schedule_changes, which takes no lock another writer waits
-- for. The forecast folds the changes into forecast_schedules before it
-- reads (services/api/internal/store/forecast.go).
--
-- Inserts (one job, a CreateJobs batch, a COPY) are counted once per
-- statement, grouped. Updates are counted per row, and only when status,
-- spec, priority or tenant is named in the UPDATE and changed: the
-- prefetcher's per-slot updates (next_fire_at, runs_staged) never fire
-- it. Deletes are counted per statement (retention purges only completed
-- and deleted jobs, which are not counted: the trigger finds nothing).

-- +goose Up
CREATE TABLE IF NOT EXISTS forecast_schedules (
    tenant    text        NOT NULL,
    status    text        NOT NULL, -- 'active' or 'paused'
    priority  smallint    NOT NULL,
    digest    bytea       NOT NULL, -- SHA-256 of schedule, jitter, anchor, job_id
    schedule  bytea       NOT NULL, -- the encoded sundial.v1.Schedule
    jitter    bytea       NOT NULL, -- the encoded max_jitter ('' for none)
    anchor    timestamptz,          -- the creation second, for an anchored schedule
    job_id    uuid,                 -- the job, for a schedule with H
    jobs      bigint      NOT NULL,
    sample    uuid[]      NOT NULL DEFAULT '{}', -- up to 20 of the jobs, for a herd's listing
    PRIMARY KEY (tenant, status, priority, digest)
);

-- Changes not yet folded into forecast_schedules; written by the
-- triggers only, emptied by the forecast's fold.
CREATE TABLE IF NOT EXISTS forecast_schedule_changes (
    seq       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- the fold drains in this order
    tenant    text        NOT NULL,
    status    text        NOT NULL,
    priority  smallint    NOT NULL,
    digest    bytea       NOT NULL,
    schedule  bytea       NOT NULL,
    jitter    bytea       NOT NULL,
    anchor    timestamptz,
    job_id    uuid,
    jobs      bigint      NOT NULL, -- +n or -n
    ids       uuid[]      NOT NULL  -- +: up to 20 of the jobs added; -: every job removed
);

-- +goose StatementBegin
-- forecast_key is the forecast_schedules key of the job whose stored spec
-- is spec: it reads the spec's schedule (field 5) and max_jitter (field
-- 13) — a field met twice is the concatenation of both, protobuf's merge
-- — and, inside the schedule and its additional_schedules, whether it
-- counts from the creation instant (an interval or rrule without a
-- start_time: anchor) or has a cron item starting with H (jobspec.Hashed:
-- job_id), as pkg/domain/forecast's Decoder does. It runs for every job written
-- (about 30 µs; docs/benchmarks.md), so it reads the bytes once with
-- one-byte tags and lengths taken without a loop, and stops at the Job's
-- first field past 13: the api encodes specs with proto.Marshal, which
-- writes fields in field-number order.
CREATE OR REPLACE FUNCTION forecast_key(spec bytea, id uuid, created timestamptz,
    OUT digest bytea, OUT schedule bytea, OUT jitter bytea, OUT anchor timestamptz, OUT job_id uuid)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    -- level 0: the Job; 1: its Schedule; 2: one of additional_schedules.
    buf bytea := spec;
    pos int := 0;
    n int := length(spec);
    b int;
    t bigint;
    sh int;
    num bigint;
    wt int;
    len bigint;
    level int := 0;
    extras bytea[] := '{}';
    has_start boolean := false;
    anchoring boolean := false;
    hashed boolean := false;
    malformed boolean := false;
BEGIN
    schedule := ''::bytea;
    jitter := ''::bytea;
    -- Every read is bounds-checked (no exception block: it would cost a
    -- subtransaction a job and bar the fill from running in parallel).
    <<levels>>
    LOOP
        WHILE pos < n LOOP
            b := get_byte(buf, pos);
            pos := pos + 1;
            IF b < 128 THEN
                num := b >> 3; wt := b & 7;
            ELSE
                t := b & 127; sh := 7;
                LOOP
                    IF pos >= n OR sh > 56 THEN malformed := true; EXIT levels; END IF;
                    b := get_byte(buf, pos); pos := pos + 1;
                    t := t | ((b & 127)::bigint << sh);
                    EXIT WHEN b < 128;
                    sh := sh + 7;
                END LOOP;
                num := t >> 3; wt := (t & 7)::int;
            END IF;
            EXIT WHEN level = 0 AND num > 13;
            IF wt = 2 THEN
                IF pos >= n THEN malformed := true; EXIT levels; END IF;
                b := get_byte(buf, pos);
                pos := pos + 1;
                IF b < 128 THEN
                    len := b;
                ELSE
                    len := b & 127; sh := 7;
                    LOOP
                        IF pos >= n OR sh > 56 THEN malformed := true; EXIT levels; END IF;
                        b := get_byte(buf, pos); pos := pos + 1;
                        len := len | ((b & 127)::bigint << sh);
                        EXIT WHEN b < 128;
                        sh := sh + 7;
                    END LOOP;
                END IF;
                IF len > n - pos THEN malformed := true; EXIT levels; END IF;
                IF level = 0 THEN
                    IF num = 5 THEN
                        schedule := schedule || substr(buf, pos + 1, len::int);
                    ELSIF num = 13 THEN
                        jitter := jitter || substr(buf, pos + 1, len::int);
                    END IF;
                ELSIF num = 1 THEN -- cron
                    -- jobspec.Hashed: an item of a field starts with H. Read
                    -- as escaped text (never an encoding error: bytes past
                    -- ASCII become \nnn), so the non-ASCII spaces U+0085
                    -- and U+00A0 are \302\205 and \302\240.
                    IF encode(substr(buf, pos + 1, len::int), 'escape')
                       ~ '(^|[[:space:],]|\\302\\205|\\302\\240)[Hh]' THEN
                        hashed := true;
                    END IF;
                ELSIF num = 3 OR num = 9 THEN -- interval, rrule
                    anchoring := true;
                ELSIF level = 1 AND num = 5 THEN -- start_time
                    has_start := true;
                ELSIF level = 1 AND num = 12 THEN -- additional_schedules
                    extras := extras || substr(buf, pos + 1, len::int);
                END IF;
                pos := pos + len::int;
            ELSIF wt = 0 THEN
                LOOP
                    IF pos >= n THEN malformed := true; EXIT levels; END IF;
                    b := get_byte(buf, pos); pos := pos + 1;
                    EXIT WHEN b < 128;
                END LOOP;
            ELSIF wt = 1 THEN
                pos := pos + 8;
            ELSIF wt = 5 THEN
                pos := pos + 4;
            ELSE
                malformed := true;
                EXIT levels;
            END IF;
        END LOOP;
        IF level = 0 THEN
            level := 1; buf := schedule;
        ELSIF cardinality(extras) > 0 THEN
            level := 2; buf := extras[1]; extras := extras[2:];
        ELSE
            EXIT;
        END IF;
        pos := 0;
        n := length(buf);
    END LOOP;
    IF malformed THEN
        -- Not a job's encoding: the trigger must not refuse the write, so
        -- the job is counted under a schedule no decoder reads, and the
        -- forecast counts it in failed_jobs, as it did reading specs.
        schedule := '\xff'::bytea; jitter := ''::bytea; anchoring := false; hashed := false;
    END IF;
    IF anchoring AND NOT has_start THEN
        anchor := date_trunc('second', created);
    END IF;
    IF hashed THEN
        job_id := id;
    END IF;
    digest := sha256(schedule || '\x00'::bytea || jitter || '\x00'::bytea
        || convert_to(coalesce(extract(epoch FROM anchor)::bigint::text, '') || '/' || coalesce(job_id::text, ''), 'UTF8'));
END
$$;

CREATE OR REPLACE FUNCTION forecast_jobs_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO forecast_schedule_changes (tenant, status, priority, digest, schedule, jitter, anchor, job_id, jobs, ids)
    SELECT r.tenant, r.status, r.priority, k.digest, k.schedule, k.jitter, k.anchor, k.job_id,
           count(*), (array_agg(r.id ORDER BY r.id))[1:20]
      FROM new_jobs AS r, LATERAL forecast_key(r.spec, r.id, r.created_at) AS k
     WHERE r.status IN ('active', 'paused')
     GROUP BY r.tenant, r.status, r.priority, k.digest, k.schedule, k.jitter, k.anchor, k.job_id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION forecast_jobs_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO forecast_schedule_changes (tenant, status, priority, digest, schedule, jitter, anchor, job_id, jobs, ids)
    SELECT r.tenant, r.status, r.priority, k.digest, k.schedule, k.jitter, k.anchor, k.job_id,
           -count(*), array_agg(r.id)
      FROM old_jobs AS r, LATERAL forecast_key(r.spec, r.id, r.created_at) AS k
     WHERE r.status IN ('active', 'paused')
     GROUP BY r.tenant, r.status, r.priority, k.digest, k.schedule, k.jitter, k.anchor, k.job_id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION forecast_job_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    o record;
    k record;
    counted_old boolean := OLD.status IN ('active', 'paused');
    counted_new boolean := NEW.status IN ('active', 'paused');
BEGIN
    IF counted_old THEN
        o := forecast_key(OLD.spec, OLD.id, OLD.created_at);
    END IF;
    IF counted_new THEN
        k := forecast_key(NEW.spec, NEW.id, NEW.created_at);
    END IF;
    -- An edit that keeps the job's key (its name, target, retries...)
    -- changes no count. Nested: PL/pgSQL does not stop at the first false
    -- operand, and k is unassigned when the job leaves the count (a delete).
    IF counted_old AND counted_new THEN
        IF OLD.tenant = NEW.tenant AND OLD.status = NEW.status
           AND OLD.priority = NEW.priority AND o.digest = k.digest THEN
            RETURN NULL;
        END IF;
    END IF;
    IF counted_old THEN
        INSERT INTO forecast_schedule_changes (tenant, status, priority, digest, schedule, jitter, anchor, job_id, jobs, ids)
        VALUES (OLD.tenant, OLD.status, OLD.priority, o.digest, o.schedule, o.jitter, o.anchor, o.job_id, -1, ARRAY[OLD.id]);
    END IF;
    IF counted_new THEN
        INSERT INTO forecast_schedule_changes (tenant, status, priority, digest, schedule, jitter, anchor, job_id, jobs, ids)
        VALUES (NEW.tenant, NEW.status, NEW.priority, k.digest, k.schedule, k.jitter, k.anchor, k.job_id, 1, ARRAY[NEW.id]);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'jobs'::regclass AND tgname = 'forecast_jobs_inserted') THEN
        CREATE TRIGGER forecast_jobs_inserted AFTER INSERT ON jobs
            REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION forecast_jobs_inserted();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'jobs'::regclass AND tgname = 'forecast_jobs_deleted') THEN
        CREATE TRIGGER forecast_jobs_deleted AFTER DELETE ON jobs
            REFERENCING OLD TABLE AS old_jobs FOR EACH STATEMENT EXECUTE FUNCTION forecast_jobs_deleted();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'jobs'::regclass AND tgname = 'forecast_job_updated') THEN
        CREATE TRIGGER forecast_job_updated AFTER UPDATE OF status, spec, priority, tenant, created_at ON jobs
            FOR EACH ROW
            WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.spec IS DISTINCT FROM NEW.spec
                  OR OLD.priority IS DISTINCT FROM NEW.priority OR OLD.tenant IS DISTINCT FROM NEW.tenant
                  OR OLD.created_at IS DISTINCT FROM NEW.created_at)
            EXECUTE FUNCTION forecast_job_updated();
    END IF;
END
$$;
-- +goose StatementEnd

-- The fill: every live job already stored, grouped. Not in the
-- triggers' transaction (NO TRANSACTION above): creating a trigger locks
-- jobs against writes until its transaction ends, and the fill reads
-- every job's spec (about 14 µs a job: minutes at 10 M), which would
-- stop the prefetcher's staging for as long. The triggers are in place
-- (committed) before this statement starts, so every write either
-- committed before its snapshot — counted here from jobs, and its change
-- rows, visible to the same snapshot, deleted by the same statement — or
-- after it, left in forecast_schedule_changes for the first fold. Run
-- again after a failure, it fills only an empty table.
WITH counted_here AS (
    DELETE FROM forecast_schedule_changes WHERE NOT EXISTS (SELECT 1 FROM forecast_schedules)
)
INSERT INTO forecast_schedules (tenant, status, priority, digest, schedule, jitter, anchor, job_id, jobs, sample)
SELECT r.tenant, r.status, r.priority, k.digest, k.schedule, k.jitter, k.anchor, k.job_id,
       count(*), (array_agg(r.id ORDER BY r.id))[1:20]
  FROM jobs AS r, LATERAL forecast_key(r.spec, r.id, r.created_at) AS k
 WHERE r.status IN ('active', 'paused') AND NOT EXISTS (SELECT 1 FROM forecast_schedules)
 GROUP BY r.tenant, r.status, r.priority, k.digest, k.schedule, k.jitter, k.anchor, k.job_id;

-- +goose Down
DROP TRIGGER IF EXISTS forecast_job_updated ON jobs;
DROP TRIGGER IF EXISTS forecast_jobs_deleted ON jobs;
DROP TRIGGER IF EXISTS forecast_jobs_inserted ON jobs;
DROP FUNCTION IF EXISTS forecast_job_updated();
DROP FUNCTION IF EXISTS forecast_jobs_deleted();
DROP FUNCTION IF EXISTS forecast_jobs_inserted();
DROP TABLE IF EXISTS forecast_schedule_changes;
DROP TABLE IF EXISTS forecast_schedules;
DROP FUNCTION IF EXISTS forecast_key(bytea, uuid, timestamptz);
