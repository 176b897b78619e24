-- calendars: each tenant's business calendars (holidays and weekend), which
-- jobs name in their schedule (sundial.v1.Schedule.calendar). spec is the
-- serialized sundial.v1.Calendar (description, holidays, weekend); the
-- columns are authoritative for tenant, name and version. Only
-- pkg/postgres/calendarstore writes this table; the prefetcher reads a job's calendar in
-- its staging transaction, so an edit applies to every instant staged
-- after it commits.

-- +goose Up
CREATE TABLE calendars (
    tenant      text        NOT NULL,
    name        text        NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    spec        bytea       NOT NULL,
    version     bigint      NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, name)
);

-- +goose Down
DROP TABLE calendars;
