-- The audit trails of the changes outside jobs and tokens (every change
-- audited). job_audit keeps the jobs' changes,
-- token_audit the tokens'.
--
-- signing_key_audit: every change to a tenant's signing keys (every change
-- audited), written by pkg/postgres/signingkey's Store in the
-- change's own transaction, so the trail holds exactly the changes that
-- committed: who (the caller, as the audit trail names callers), which
-- key the change made, what (create, rotate), when (Postgres's clock, as
-- for the key itself) and detail (the overlap's end, the key rotated out,
-- keys ended or removed). Key ids only: a key's secret, sealed or not, is
-- never here.
--
-- A table of its own rather than rows in token_audit: one writer per
-- table (pkg/postgres/signingkey writes signing keys and their trail, the api's
-- tokens package tokens and theirs), and a key id is not a token id.
-- Rows are never deleted, unlike signing_keys' rows of long-expired keys.

-- +goose Up
CREATE TABLE signing_key_audit (
    id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant  text        NOT NULL,
    key_id  text        NOT NULL,
    actor   text        NOT NULL,
    action  text        NOT NULL CHECK (action IN ('create', 'rotate')),
    at      timestamptz NOT NULL,
    detail  jsonb       NOT NULL DEFAULT '{}'::jsonb
);
-- ListSigningKeyAudit: a tenant's trail, newest first, paged by id.
CREATE INDEX signing_key_audit_tenant ON signing_key_audit (tenant, id DESC);

-- calendar_audit: every change to a tenant's business calendars (create,
-- update, delete; an iCalendar import is a create or an update whose
-- detail says so), written by pkg/postgres/calendarstore's Store in the change's own
-- transaction: who, which calendar, the version the change produced (the
-- last version for a delete), when, and detail (the holidays' count, jobs
-- rescheduled). The trail outlives the calendar.
CREATE TABLE calendar_audit (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant    text        NOT NULL,
    calendar  text        NOT NULL,
    actor     text        NOT NULL,
    action    text        NOT NULL CHECK (action IN ('create', 'update', 'delete')),
    version   bigint      NOT NULL,
    at        timestamptz NOT NULL DEFAULT now(),
    detail    jsonb       NOT NULL DEFAULT '{}'::jsonb
);
-- ListCalendarAudit: a tenant's trail, or one calendar's, newest first.
CREATE INDEX calendar_audit_tenant ON calendar_audit (tenant, id DESC);
CREATE INDEX calendar_audit_calendar ON calendar_audit (tenant, calendar, id DESC);

-- +goose Down
DROP TABLE calendar_audit;
DROP TABLE signing_key_audit;
