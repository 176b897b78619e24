// Package forecast says how many firings are due in the time to come, from
// the schedules themselves: per minute over a window of up to seven days,
// per second inside the busiest minutes, by tenant and by priority, with
// the herds — many firings due at one instant — marked and the jobs that
// make them listed with a suggested jitter or H slot.
//
// # Exact, computed once per distinct schedule
//
// Nothing is sampled. Each job is counted, but a schedule is evaluated once
// however many jobs share it: a job comes with a Key that is equal for
// jobs with identical firings (FromJob and Decoder derive it from the
// schedule's encoding, plus the creation anchor where an interval or a
// recurrence rule counts from it; Decoder reads it straight out of a stored
// spec without decoding the rest, and decodes each distinct schedule
// once), and the builder enumerates one Key's
// firings in the window with the engine's Next — so daylight saving is
// exactly what the prefetcher will do, per zone — and adds them once per
// (tenant, priority, jitter) class of the jobs that share it. A fleet of
// 10 M jobs written in a few thousand distinct ways costs a few thousand
// enumerations plus one map update per job; BenchmarkForecast10M measures
// it (docs/benchmarks.md).
//
// A caller that already knows how many jobs share a schedule (the api
// reads the per-schedule counts Postgres keeps, migration 00027) passes
// them with Decoder.Count and Builder.AddN: one call per (tenant,
// priority, jitter, schedule), with a few of the jobs' ids to list, the
// same forecast as adding the jobs one by one.
//
// What bounds the time is therefore the number of distinct schedules and
// their firings in the window, and two caps hold it: MaxSchedules (distinct
// Keys evaluated) and MaxFirings (Next calls in all). Keys are evaluated in
// order of how many jobs share them, so when a cap is reached what is left
// out is the long tail of rare schedules, and the Forecast says so
// (Partial, with the jobs and schedules not counted); it never silently
// undercounts.
//
// # Due instants, jitter and herds
//
// Counts are of due instants (the schedule's slot, before jitter), which
// is what the staging pipeline sees. A job's jitter moves its fire instant
// uniformly over [slot, slot+max_jitter) (pkg/domain/firing.Jitter), so the
// per-second figures at the peaks give both the due count and the expected
// count once jitter has spread it. A herd is one instant at which at least
// HerdThreshold firings are due; it lists, per distinct schedule, the jobs
// (a bounded sample) with how many have no jitter, and suggests for them a
// max_jitter and an H form of their expression (schedule.Parse with the
// job's id as the hash seed resolves it to the slot the job would get).
package forecast
