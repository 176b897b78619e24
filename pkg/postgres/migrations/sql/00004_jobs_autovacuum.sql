-- Every prefetch pass updates next_fire_at of each job it claims, a non-HOT
-- update (the column is indexed) that leaves one dead row version per claim:
-- 1,000 per-second jobs leave 1,000 a second. The claim's index scan starts
-- where those dead versions of the hot jobs sit. With the default scale
-- factor (20 % of the table) autovacuum waited for 400,000 dead versions at
-- 2 M rows and 2,000,000 at 10 M (half an hour of a 1,000/s load), so the
-- more idle jobs a cluster held, the slower its passes got (measured by the
-- benchmark's registered scenario, docs/benchmarks.md). Vacuum the table by
-- the churn of its hot rows instead of by its size, and let each run do more
-- work before it pauses.

-- +goose Up
ALTER TABLE jobs SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 20000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_vacuum_cost_limit = 2000
);

-- +goose Down
ALTER TABLE jobs RESET (
    autovacuum_vacuum_scale_factor,
    autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor,
    autovacuum_vacuum_cost_limit
);
