-- A row of forecast_schedules for jobs whose cron has H now counts every
-- job whose H lands on the same values (the api's fold keys it so, in Go:
-- the values are hashed from the job's id, which the triggers' SQL does
-- not do), instead of one row per job. h_resolved marks the rows the fold
-- keyed that way; a row of H jobs written before (one per job, by the
-- fill of 00027 or an earlier fold) is re-keyed by the next fold, found
-- through the partial index, so a fleet of H jobs is read as at most one
-- row per place its H can land.

-- +goose Up
ALTER TABLE forecast_schedules ADD COLUMN IF NOT EXISTS h_resolved boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS forecast_schedules_h_unresolved ON forecast_schedules (tenant, status, priority, digest)
    WHERE job_id IS NOT NULL AND NOT h_resolved;

-- +goose Down
DROP INDEX IF EXISTS forecast_schedules_h_unresolved;
ALTER TABLE forecast_schedules DROP COLUMN IF EXISTS h_resolved;
