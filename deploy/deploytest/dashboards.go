package deploytest

import (
	"encoding/json"
	"fmt"
)

// The Grafana dashboards are written here as data and rendered to JSON by
// Dashboards; `make deploy-generate` writes the JSON into
// deploy/grafana/dashboards (provisioned by docker compose and `make
// run-observability`) and into the chart's files/dashboards, and a test
// fails when either copy is stale. Generating them keeps panel ids, grid
// positions and datasource references consistent, and puts every query in
// one reviewable place.
//
// Queries use only the metrics and labels the services export (the
// integration test checks the names against a running platform). Every
// worker exports the whole group's lag, so lag queries take max by
// (group, topic, partition) first.

// dashboard is one dashboard: rows of panels.
type dashboard struct {
	UID, Title, Description string
	Tags                    []string
	Vars                    []variable
	Rows                    []row
}

type row struct {
	Title  string
	Panels []panel
}

type variable struct {
	Name, Label, Query string
	Multi              bool
}

type panel struct {
	Title, Description string
	// Kind is timeseries (default), heatmap or stat.
	Kind   string
	Unit   string
	Width  int // of 24; 12 when zero
	Height int // 8 when zero
	Stack  bool
	// Signed panels can go below zero (no y-axis floor).
	Signed  bool
	Targets []target
}

type target struct{ Expr, Legend string }

// rate is the range every rate() in a dashboard uses.
const rate = "$__rate_interval"

// Dashboards returns the dashboards' JSON by file name.
func Dashboards() map[string][]byte {
	out := map[string][]byte{}
	for _, d := range []dashboard{overview(), servicesDashboard(), tenantsDashboard(), jobDashboard()} {
		b, err := json.MarshalIndent(d.model(), "", "  ")
		if err != nil {
			panic(err)
		}
		out[d.UID+".json"] = append(b, '\n')
	}
	return out
}

func overview() dashboard {
	return dashboard{
		UID:   "sundial-overview",
		Title: "Sundial / Overview",
		Description: "Is Sundial firing on time? Firings, lateness, the pipeline from outbox to worker, " +
			"coordination and storage. Runbooks: docs/operations.md.",
		Tags: []string{"sundial"},
		Vars: []variable{
			{Name: "priority", Label: "Priority", Query: "label_values(sundial_worker_firings_total, priority)", Multi: true},
			{Name: "group", Label: "Worker group", Query: "label_values(sundial_worker_group_lag_records, group)", Multi: true},
		},
		Rows: []row{
			{Title: "Firing", Panels: []panel{
				{Title: "Firings/s by outcome", Unit: "ops", Stack: true,
					Description: "Every firing a worker finished handling, by outcome. succeeded, failed, retry_scheduled (failed, next attempt staged) and dead (last attempt failed: to the DLQ) reached the target; poison (delivered too often without finishing) went to the DLQ unattempted; duplicate, stale, fenced and lease_conflict were dropped on purpose.",
					Targets:     []target{{fmt.Sprintf(`sum by (outcome) (rate(sundial_worker_firings_total{priority=~"$priority"}[%s]))`, rate), "{{outcome}}"}}},
				{Title: "Firings/s by priority", Unit: "ops", Stack: true,
					Description: "Attempts that reached their target (whatever the target answered), by priority.",
					Targets:     []target{{fmt.Sprintf(`sum by (priority) (rate(sundial_worker_firings_total{priority=~"$priority", outcome=~"succeeded|failed|retry_scheduled|dead"}[%s]))`, rate), "{{priority}}"}}},
				{Title: "Lateness at the target", Kind: "heatmap", Unit: "s",
					Description: "Attempt start (after the lease) minus fire instant, by the database clock: what the target observes.",
					Targets:     []target{{fmt.Sprintf(`sum by (le) (increase(sundial_worker_fire_lateness_seconds_bucket{stage="target", priority=~"$priority"}[%s]))`, rate), "{{le}}"}}},
				{Title: "Lateness p50 / p99", Unit: "s",
					Description: "Quantiles of the same histogram, overall and p99 per priority.",
					Targets: []target{
						{fmt.Sprintf(`histogram_quantile(0.5, sum by (le) (rate(sundial_worker_fire_lateness_seconds_bucket{stage="target", priority=~"$priority"}[%s])))`, rate), "p50"},
						{fmt.Sprintf(`histogram_quantile(0.99, sum by (le) (rate(sundial_worker_fire_lateness_seconds_bucket{stage="target", priority=~"$priority"}[%s])))`, rate), "p99"},
						{fmt.Sprintf(`histogram_quantile(0.99, sum by (le, priority) (rate(sundial_worker_fire_lateness_seconds_bucket{stage="target", priority=~"$priority"}[%s])))`, rate), "p99 {{priority}}"},
					}},
				{Title: "Dead-lettered firings/s", Unit: "ops",
					Description: "Executions sent to the DLQ (poison: delivered too often without finishing). Re-drive with schedctl dlq.",
					Targets:     []target{{fmt.Sprintf(`sum by (priority) (rate(sundial_worker_firings_total{outcome="poison", priority=~"$priority"}[%s]))`, rate), "{{priority}}"}}},
				{Title: "Lease conflicts/s", Unit: "ops",
					Description: "Firings whose execution lease another delivery held (a redelivery after a rebalance, or a duplicate). Normal in bursts around rebalances.",
					Targets:     []target{{fmt.Sprintf(`sum(rate(sundial_worker_lease_conflicts_total[%s]))`, rate), "conflicts"}}},
			}},
			{Title: "Pipeline: outbox → relay → Kafka → worker", Panels: []panel{
				{Title: "Outbox depth", Unit: "short",
					Description: "Rows in the Postgres outbox (every relay counts the same table: max). Due rows wait for a relay.",
					Targets: []target{
						{`max(sundial_relay_outbox_rows)`, "all rows"},
						{`max(sundial_relay_outbox_due_rows)`, "due"},
					}},
				{Title: "Oldest due outbox row", Unit: "s",
					Description: "How long the oldest due row has waited for a relay. Alert on this rather than on depth.",
					Targets:     []target{{`max(sundial_relay_outbox_oldest_due_seconds)`, "oldest due"}}},
				{Title: "Relay publish latency", Unit: "s",
					Description: "From a row becoming publishable to Kafka's acknowledgement.",
					Targets: []target{
						{fmt.Sprintf(`histogram_quantile(0.5, sum by (le) (rate(sundial_relay_publish_latency_seconds_bucket[%s])))`, rate), "p50"},
						{fmt.Sprintf(`histogram_quantile(0.99, sum by (le) (rate(sundial_relay_publish_latency_seconds_bucket[%s])))`, rate), "p99"},
					}},
				{Title: "Relay rows published/s and errors", Unit: "ops",
					Targets: []target{
						{fmt.Sprintf(`sum by (priority) (rate(sundial_relay_rows_published_total[%s]))`, rate), "published {{priority}}"},
						{fmt.Sprintf(`sum by (reason) (rate(sundial_relay_publish_errors_total[%s]))`, rate), "error {{reason}}"},
					}},
				{Title: "Consumer lag per topic/partition", Unit: "short", Stack: true,
					Description: "End offset minus the worker group's committed offset. Workers commit only below the earliest unfinished firing and hold firings up to the prefetch window ahead, so a healthy lag is about firings/s × (window + a few s). Growing without more firings = workers behind.",
					Targets:     []target{{`max by (topic, partition) (sundial_worker_group_lag_records{group=~"$group"})`, "{{topic}}/{{partition}}"}}},
				{Title: "Held, ready and executing firings", Unit: "short",
					Description: "Held: in memory until their instant. Ready: due, waiting for an executor (should stay near 0). Executing: attempts in flight. Due backlog: firings past their instant not started, in the ready queues and left in Kafka (the autoscaling signal; 0 however many are held).",
					Targets: []target{
						{`sum(sundial_worker_held_firings)`, "held"},
						{`sum by (priority) (sundial_worker_ready_queue_depth)`, "ready {{priority}}"},
						{`sum(sundial_worker_executing)`, "executing"},
						{`sum by (source) (sundial_worker_due_backlog_firings{group=~"$group"})`, "due backlog {{source}}"},
					}},
			}},
			{Title: "Coordination", Panels: []panel{
				{Title: "Prefetcher leaders per election", Unit: "short", Width: 8,
					Description: "Prefetchers leading each election (the election path). Exactly one should, at every instant; the instance lines say which.",
					Targets: []target{
						{`sum by (election) (sundial_prefetcher_leader)`, "leaders {{election}}"},
						{`max by (election, instance) (sundial_prefetcher_leader) > 0`, "{{instance}}"},
					}},
				{Title: "Prefetch lag", Unit: "s", Width: 8,
					Description: "How long the oldest claimed job had been due for staging; above the window (2m) slots were staged after their instant.",
					Targets:     []target{{fmt.Sprintf(`histogram_quantile(0.99, sum by (le) (rate(sundial_prefetcher_lag_seconds_bucket[%s])))`, rate), "p99"}}},
				{Title: "Fenced transactions and failed passes", Unit: "ops", Width: 8,
					Description: "Fenced: a stale leader's transaction refused by the epoch check (expected briefly after a failover, never for long).",
					Targets: []target{
						{fmt.Sprintf(`sum(rate(sundial_prefetcher_fenced_total[%s]))`, rate), "fenced"},
						{fmt.Sprintf(`sum(rate(sundial_prefetcher_errors_total[%s]))`, rate), "failed passes"},
					}},
			}},
			{Title: "Storage", Panels: []panel{
				{Title: "Cassandra write latency", Unit: "s",
					Description: "Ledger writes (exec and batch) from the workers, and reads from the api.",
					Targets: []target{
						{fmt.Sprintf(`histogram_quantile(0.99, sum by (le, op) (rate(sundial_ledger_request_duration_seconds_bucket{op=~"exec|batch"}[%s])))`, rate), "p99 {{op}}"},
						{fmt.Sprintf(`histogram_quantile(0.5, sum by (le, op) (rate(sundial_ledger_request_duration_seconds_bucket{op=~"exec|batch"}[%s])))`, rate), "p50 {{op}}"},
					}},
				{Title: "Cassandra requests/s by outcome", Unit: "ops",
					Targets: []target{{fmt.Sprintf(`sum by (op, outcome) (rate(sundial_ledger_request_duration_seconds_count[%s]))`, rate), "{{op}} {{outcome}}"}}},
				{Title: "Ledger writes/s by result", Unit: "ops",
					Description: "The workers' ledger recorder: retry means Cassandra failed and the write is retried; dropped means the row was lost.",
					Targets:     []target{{fmt.Sprintf(`sum by (result) (rate(sundial_worker_ledger_writes_total[%s]))`, rate), "{{result}}"}}},
				{Title: "Worker clock offset from Postgres", Unit: "s", Signed: true,
					Description: "Database clock minus the worker's clock; workers correct for it, but a large offset means NTP is broken somewhere.",
					Targets:     []target{{`max by (instance) (sundial_worker_clock_offset_seconds)`, "{{instance}}"}}},
			}},
		},
	}
}

func servicesDashboard() dashboard {
	return dashboard{
		UID:   "sundial-services",
		Title: "Sundial / Services",
		Description: "Per-process detail of the four services: api requests, prefetcher passes, relay claims, " +
			"worker partitions and commits. Per-tenant views: Sundial / Tenants; watched jobs: Sundial / Job.",
		Tags: []string{"sundial"},
		Vars: []variable{
			{Name: "instance", Label: "Instance", Query: "label_values(process_start_time_seconds, instance)", Multi: true},
		},
		Rows: []row{
			{Title: "api", Panels: []panel{
				{Title: "Requests/s by method and code", Unit: "reqps", Stack: true,
					Targets: []target{{fmt.Sprintf(`sum by (method, code) (rate(sundial_api_requests_total{instance=~"$instance"}[%s]))`, rate), "{{method}} {{code}}"}}},
				{Title: "Request latency p99 by method", Unit: "s",
					Targets: []target{{fmt.Sprintf(`histogram_quantile(0.99, sum by (le, method) (rate(sundial_api_request_duration_seconds_bucket{instance=~"$instance"}[%s])))`, rate), "{{method}}"}}},
				{Title: "Version publish failures and dropped firings", Unit: "ops",
					Description: "Publish failures: Redis was down when a job changed (workers may fire the old version of firings already in Kafka). Dropped: unpublished outbox rows a change deleted.",
					Targets: []target{
						{fmt.Sprintf(`sum(rate(sundial_api_version_publish_failures_total{instance=~"$instance"}[%s]))`, rate), "publish failures"},
						{fmt.Sprintf(`sum(rate(sundial_api_dropped_firings_total{instance=~"$instance"}[%s]))`, rate), "dropped firings"},
						{fmt.Sprintf(`sum(rate(sundial_api_triggers_total{instance=~"$instance"}[%s]))`, rate), "manual triggers"},
					}},
				{Title: "Quota rejections/s by quota", Unit: "ops",
					Description: "Requests refused with ResourceExhausted: max_jobs, min_interval or create_rate of a tenant.",
					Targets:     []target{{fmt.Sprintf(`sum by (quota) (rate(sundial_api_quota_rejections_total{instance=~"$instance"}[%s]))`, rate), "{{quota}}"}}},
				{Title: "Backfilled and re-driven firings/s", Unit: "ops",
					Description: "Firings staged by BackfillJob and by DLQ re-drives (both paced through the outbox).",
					Targets: []target{
						{fmt.Sprintf(`sum(rate(sundial_api_backfill_firings_total{instance=~"$instance"}[%s]))`, rate), "backfill"},
						{fmt.Sprintf(`sum(rate(sundial_api_dead_letters_redriven_total{instance=~"$instance"}[%s]))`, rate), "re-driven"},
					}},
			}},
			{Title: "prefetcher", Panels: []panel{
				{Title: "Slots staged and skipped/s", Unit: "ops",
					Description: "Staged: outbox rows written (on_time, catch_up). Skipped: slots the misfire policy or grace did not stage (each has a ledger row saying why).",
					Targets: []target{
						{fmt.Sprintf(`sum by (kind) (rate(sundial_prefetcher_slots_staged_total{instance=~"$instance"}[%s]))`, rate), "{{kind}}"},
						{fmt.Sprintf(`sum by (reason) (rate(sundial_prefetcher_slots_skipped_total{instance=~"$instance"}[%s]))`, rate), "skipped: {{reason}}"},
					}},
				{Title: "Pass duration p99", Unit: "s",
					Targets: []target{{fmt.Sprintf(`histogram_quantile(0.99, sum by (le, instance) (rate(sundial_prefetcher_tick_duration_seconds_bucket{instance=~"$instance"}[%s])))`, rate), "{{instance}}"}}},
				{Title: "Ranges led", Unit: "short",
					Description: "Partition ranges each prefetcher leads; summed over the deployment they equal --ranges (SundialPrefetchRangeUnled fires when they do not).",
					Targets:     []target{{`max by (instance) (sundial_prefetcher_ranges_led{instance=~"$instance"})`, "{{instance}}"}}},
				{Title: "Leader epoch", Unit: "none",
					Targets: []target{{`max by (instance) (sundial_prefetcher_leader_epoch{instance=~"$instance"})`, "{{instance}}"}}},
				{Title: "Catch-up release horizon", Unit: "s",
					Description: "How far past now the last paced catch-up firing is released (0: none pending); recovery after an outage drains at --catch-up-rate.",
					Targets:     []target{{`max(sundial_prefetcher_catch_up_horizon_seconds{instance=~"$instance"})`, "horizon"}}},
				{Title: "Jobs completed and unschedulable/s", Unit: "ops",
					Targets: []target{
						{fmt.Sprintf(`sum(rate(sundial_prefetcher_jobs_completed_total{instance=~"$instance"}[%s]))`, rate), "completed"},
						{fmt.Sprintf(`sum(rate(sundial_prefetcher_jobs_unschedulable_total{instance=~"$instance"}[%s]))`, rate), "unschedulable"},
					}},
			}},
			{Title: "relay", Panels: []panel{
				{Title: "Claimed rows per batch p50 / p99", Unit: "short",
					Description: "At --batch-size the relay is behind and loops without waiting.",
					Targets: []target{
						{fmt.Sprintf(`histogram_quantile(0.5, sum by (le) (rate(sundial_relay_claim_batch_rows_bucket{instance=~"$instance"}[%s])))`, rate), "p50"},
						{fmt.Sprintf(`histogram_quantile(0.99, sum by (le) (rate(sundial_relay_claim_batch_rows_bucket{instance=~"$instance"}[%s])))`, rate), "p99"},
					}},
				{Title: "Wake-ups/s by source, failed cycles", Unit: "ops",
					Targets: []target{
						{fmt.Sprintf(`sum by (source) (rate(sundial_relay_wakeups_total{instance=~"$instance"}[%s]))`, rate), "{{source}}"},
						{fmt.Sprintf(`sum by (stage) (rate(sundial_relay_cycle_errors_total{instance=~"$instance"}[%s]))`, rate), "failed {{stage}}"},
					}},
				{Title: "LISTEN connection up", Unit: "short",
					Targets: []target{{`max by (instance) (sundial_relay_listening{instance=~"$instance"})`, "{{instance}}"}}},
			}},
			{Title: "worker", Panels: []panel{
				{Title: "Assigned partitions", Unit: "short",
					Targets: []target{{`max by (instance) (sundial_worker_assigned_partitions{instance=~"$instance"})`, "{{instance}}"}}},
				{Title: "Unfetched and uncommitted records", Unit: "short",
					Description: "Unfetched: on the broker, not yet fetched by the partition's owner. Uncommitted: fetched but below an unfinished firing.",
					Targets: []target{
						{`sum by (instance) (sundial_worker_consumer_lag_records{instance=~"$instance"})`, "unfetched {{instance}}"},
						{`sum by (instance) (sundial_worker_uncommitted_records{instance=~"$instance"})`, "uncommitted {{instance}}"},
					}},
				{Title: "Offset commits/s by result", Unit: "ops",
					Targets: []target{{fmt.Sprintf(`sum by (result) (rate(sundial_worker_offset_commits_total{instance=~"$instance"}[%s]))`, rate), "{{result}}"}}},
				{Title: "Lateness by stage p99", Unit: "s",
					Description: "timer: the holder released the firing; target: the attempt started (after the lease). The gap is the ready queue plus the Redis lease call.",
					Targets:     []target{{fmt.Sprintf(`histogram_quantile(0.99, sum by (le, stage) (rate(sundial_worker_fire_lateness_seconds_bucket{instance=~"$instance"}[%s])))`, rate), "{{stage}}"}}},
				{Title: "Lag exporter freshness", Unit: "s",
					Description: "Seconds since each worker last read the group's offsets (every 10 s when healthy).",
					Targets: []target{
						{`time() - max by (instance) (sundial_worker_group_lag_updated_timestamp_seconds{instance=~"$instance"})`, "{{instance}}"},
						{fmt.Sprintf(`sum(rate(sundial_worker_group_lag_errors_total{instance=~"$instance"}[%s]))`, rate), "read errors/s"},
					}},
			}},
			{Title: "Processes", Panels: []panel{
				{Title: "Resident memory", Unit: "bytes",
					Targets: []target{{`max by (instance) (process_resident_memory_bytes{instance=~"$instance"})`, "{{instance}}"}}},
				{Title: "CPU", Unit: "percentunit",
					Targets: []target{{fmt.Sprintf(`sum by (instance) (rate(process_cpu_seconds_total{instance=~"$instance"}[%s]))`, rate), "{{instance}}"}}},
				{Title: "Goroutines", Unit: "short",
					Targets: []target{{`max by (instance) (go_goroutines{instance=~"$instance"})`, "{{instance}}"}}},
			}},
		},
	}
}

// tenantsDashboard is the per-tenant view, from the worker's tenant label
// (bounded by --metrics-max-tenants; tenants past the cap are "other").
// Per-job history is the ledger's (schedctl history), not Prometheus's:
// one series per job would be unbounded; only the jobs the workers watch
// have series of their own (jobDashboard).
func tenantsDashboard() dashboard {
	const attempted = `outcome=~"succeeded|failed|retry_scheduled|dead"`
	const failed = `outcome=~"failed|retry_scheduled|dead"`
	return dashboard{
		UID:   "sundial-tenants",
		Title: "Sundial / Tenants",
		Description: "Firings, failures and lateness per tenant: which tenant's jobs fail or fire late, and how much of the " +
			"platform each uses. Tenants past the worker's --metrics-max-tenants are counted as \"other\". Runbooks: docs/operations.md.",
		Tags: []string{"sundial"},
		Vars: []variable{
			{Name: "tenant", Label: "Tenant", Query: "label_values(sundial_worker_firings_total, tenant)", Multi: true},
			{Name: "priority", Label: "Priority", Query: "label_values(sundial_worker_firings_total, priority)", Multi: true},
		},
		Rows: []row{
			{Title: "Across tenants", Panels: []panel{
				{Title: "Attempts/s by tenant", Unit: "ops", Stack: true,
					Description: "Attempts that reached their target (whatever it answered), by tenant: each tenant's share of the platform.",
					Targets:     []target{{fmt.Sprintf(`sum by (tenant) (rate(sundial_worker_firings_total{%s, tenant=~"$tenant", priority=~"$priority"}[%s]))`, attempted, rate), "{{tenant}}"}}},
				{Title: "Failed attempts by tenant", Unit: "percentunit",
					Description: "Share of each tenant's attempts that failed (retried, dead or not retried). A tenant alone here has a failing target; all tenants together point at the platform or the network.",
					Targets: []target{{fmt.Sprintf(`sum by (tenant) (rate(sundial_worker_firings_total{%s, tenant=~"$tenant", priority=~"$priority"}[%s])) / sum by (tenant) (rate(sundial_worker_firings_total{%s, tenant=~"$tenant", priority=~"$priority"}[%s]))`,
						failed, rate, attempted, rate), "{{tenant}}"}}},
				{Title: "Lateness p99 by tenant", Unit: "s",
					Description: "Attempt start minus fire instant, p99 per tenant. One tenant late alone: its firings wait behind each other (host rate limits, overlap) or its target is slow to accept connections.",
					Targets:     []target{{fmt.Sprintf(`histogram_quantile(0.99, sum by (le, tenant) (rate(sundial_worker_fire_lateness_seconds_bucket{stage="target", tenant=~"$tenant", priority=~"$priority"}[%s])))`, rate), "{{tenant}}"}}},
				{Title: "Dead-lettered/s by tenant", Unit: "ops",
					Description: "Executions sent to the DLQ (attempts exhausted, or poison), by tenant. schedctl dlq list --tenant names them.",
					Targets:     []target{{fmt.Sprintf(`sum by (tenant) (rate(sundial_worker_firings_total{outcome=~"dead|poison", tenant=~"$tenant", priority=~"$priority"}[%s]))`, rate), "{{tenant}}"}}},
			}},
			{Title: "Selected tenants", Panels: []panel{
				{Title: "Firings/s by outcome", Unit: "ops", Stack: true,
					Description: "Every firing of the selected tenants a worker finished handling, by outcome (see Sundial / Overview for what each means).",
					Targets:     []target{{fmt.Sprintf(`sum by (outcome) (rate(sundial_worker_firings_total{tenant=~"$tenant", priority=~"$priority"}[%s]))`, rate), "{{outcome}}"}}},
				{Title: "Lateness at the target", Kind: "heatmap", Unit: "s",
					Description: "Attempt start (after the lease) minus fire instant, for the selected tenants.",
					Targets:     []target{{fmt.Sprintf(`sum by (le) (increase(sundial_worker_fire_lateness_seconds_bucket{stage="target", tenant=~"$tenant", priority=~"$priority"}[%s]))`, rate), "{{le}}"}}},
				{Title: "Lateness p50 / p99 by priority", Unit: "s",
					Targets: []target{
						{fmt.Sprintf(`histogram_quantile(0.5, sum by (le, priority) (rate(sundial_worker_fire_lateness_seconds_bucket{stage="target", tenant=~"$tenant", priority=~"$priority"}[%s])))`, rate), "p50 {{priority}}"},
						{fmt.Sprintf(`histogram_quantile(0.99, sum by (le, priority) (rate(sundial_worker_fire_lateness_seconds_bucket{stage="target", tenant=~"$tenant", priority=~"$priority"}[%s])))`, rate), "p99 {{priority}}"},
					}},
				{Title: "Held back or dropped/s", Unit: "ops", Stack: true,
					Description: "Firings of the selected tenants that did not reach the target this time: tenant_limited (the tenant's firing-rate quota), rate_limited and concurrency_limited (the target host's limits) and overlap_waiting wait and try again; overlap_skipped, stale, duplicate and fenced were dropped on purpose.",
					Targets:     []target{{fmt.Sprintf(`sum by (outcome) (rate(sundial_worker_firings_total{outcome=~"tenant_limited|rate_limited|concurrency_limited|overlap_waiting|overlap_skipped|stale|duplicate|fenced|lease_conflict", tenant=~"$tenant", priority=~"$priority"}[%s]))`, rate), "{{outcome}}"}}},
			}},
		},
	}
}

// jobDashboard is the per-job view of the watched jobs: the workers'
// --metrics-job-ids, which alone get the job_id label, so the variable
// lists only them. Jobs nobody watches have their history in the ledger.
func jobDashboard() dashboard {
	const attempted = `outcome=~"succeeded|failed|retry_scheduled|dead"`
	const failed = `outcome=~"failed|retry_scheduled|dead"`
	return dashboard{
		UID:   "sundial-job",
		Title: "Sundial / Job",
		Description: "Firings, failures and lateness of one job. Only the jobs the workers watch (--metrics-job-ids) appear; " +
			"any job's executions are in its history (schedctl history). Runbooks: docs/operations.md.",
		Tags: []string{"sundial"},
		Vars: []variable{
			{Name: "job_id", Label: "Job", Query: "label_values(sundial_worker_job_firings_total, job_id)"},
		},
		Rows: []row{
			{Title: "Firing", Panels: []panel{
				{Title: "Firings/s by outcome", Unit: "ops", Stack: true,
					Description: "Every firing of the job a worker finished handling, by outcome (see Sundial / Overview for what each means). A job's firings/s is about its schedule's rate; retries and redeliveries add to it.",
					Targets:     []target{{fmt.Sprintf(`sum by (outcome) (rate(sundial_worker_job_firings_total{job_id=~"$job_id"}[%s]))`, rate), "{{outcome}}"}}},
				{Title: "Failed attempts", Unit: "percentunit",
					Description: "Share of the job's attempts that failed (retried, dead or not retried). Which attempts failed and why: schedctl history.",
					Targets: []target{{fmt.Sprintf(`sum by (job_id) (rate(sundial_worker_job_firings_total{%s, job_id=~"$job_id"}[%s])) / sum by (job_id) (rate(sundial_worker_job_firings_total{%s, job_id=~"$job_id"}[%s]))`,
						failed, rate, attempted, rate), "{{job_id}}"}}},
			}},
			{Title: "Lateness", Panels: []panel{
				{Title: "Lateness at the target", Kind: "heatmap", Unit: "s",
					Description: "Attempt start (after the lease) minus fire instant, by the database clock, for the job's attempts.",
					Targets:     []target{{fmt.Sprintf(`sum by (le) (increase(sundial_worker_job_lateness_seconds_bucket{job_id=~"$job_id"}[%s]))`, rate), "{{le}}"}}},
				{Title: "Lateness p50 / p99", Unit: "s",
					Description: "Quantiles of the same histogram. A job firing once a minute gives few samples per interval: read p99 over a longer range.",
					Targets: []target{
						{fmt.Sprintf(`histogram_quantile(0.5, sum by (le) (rate(sundial_worker_job_lateness_seconds_bucket{job_id=~"$job_id"}[%s])))`, rate), "p50"},
						{fmt.Sprintf(`histogram_quantile(0.99, sum by (le) (rate(sundial_worker_job_lateness_seconds_bucket{job_id=~"$job_id"}[%s])))`, rate), "p99"},
					}},
			}},
		},
	}
}

// model renders the Grafana dashboard JSON model (schema 39, Grafana 10/11).
func (d dashboard) model() any {
	ds := map[string]string{"type": "prometheus", "uid": "${datasource}"}
	vars := []any{map[string]any{
		"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
		"current": map[string]any{}, "hide": 0, "refresh": 1, "regex": "", "options": []any{},
	}}
	for _, v := range d.Vars {
		vars = append(vars, map[string]any{
			"name": v.Name, "label": v.Label, "type": "query", "datasource": ds,
			"query":      map[string]any{"query": v.Query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
			"definition": v.Query, "refresh": 2, "sort": 1, "multi": v.Multi, "includeAll": true,
			"allValue": ".*", "current": map[string]any{}, "hide": 0, "options": []any{}, "regex": "",
		})
	}
	var panels []any
	id, y := 1, 0
	for _, r := range d.Rows {
		panels = append(panels, map[string]any{
			"id": id, "type": "row", "title": r.Title, "collapsed": false, "panels": []any{},
			"gridPos": map[string]int{"h": 1, "w": 24, "x": 0, "y": y},
		})
		id++
		y++
		x, rowH := 0, 0
		for _, p := range r.Panels {
			w, h := p.Width, p.Height
			if w == 0 {
				w = 12
			}
			if h == 0 {
				h = 8
			}
			if x+w > 24 {
				x, y = 0, y+rowH
				rowH = 0
			}
			panels = append(panels, p.model(id, ds, map[string]int{"h": h, "w": w, "x": x, "y": y}))
			id++
			x += w
			rowH = max(rowH, h)
		}
		y += rowH
	}
	return map[string]any{
		"uid": d.UID, "title": d.Title, "description": d.Description, "tags": d.Tags,
		"editable": true, "graphTooltip": 1, "schemaVersion": 39, "version": 1,
		"refresh": "30s", "time": map[string]string{"from": "now-1h", "to": "now"},
		"timepicker": map[string]any{}, "timezone": "", "weekStart": "", "fiscalYearStartMonth": 0,
		"liveNow": false, "links": []any{},
		"annotations": map[string]any{"list": []any{map[string]any{
			"builtIn": 1, "datasource": map[string]string{"type": "grafana", "uid": "-- Grafana --"},
			"enable": true, "hide": true, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
			"type": "dashboard",
		}}},
		"templating": map[string]any{"list": vars},
		"panels":     panels,
	}
}

func (p panel) model(id int, ds map[string]string, grid map[string]int) any {
	kind := p.Kind
	if kind == "" {
		kind = "timeseries"
	}
	var targets []any
	for i, t := range p.Targets {
		tm := map[string]any{
			"refId": string(rune('A' + i)), "datasource": ds, "expr": t.Expr,
			"legendFormat": t.Legend, "range": true, "editorMode": "code",
		}
		if kind == "heatmap" {
			tm["format"] = "heatmap"
		}
		targets = append(targets, tm)
	}
	m := map[string]any{
		"id": id, "type": kind, "title": p.Title, "description": p.Description,
		"datasource": ds, "gridPos": grid, "targets": targets,
	}
	switch kind {
	case "heatmap":
		m["fieldConfig"] = map[string]any{"defaults": map[string]any{}, "overrides": []any{}}
		m["options"] = map[string]any{
			"calculate": false, "cellGap": 1,
			"color":        map[string]any{"mode": "scheme", "scheme": "Oranges", "scale": "exponential", "exponent": 0.5, "steps": 64, "fill": "dark", "reverse": false},
			"yAxis":        map[string]any{"axisPlacement": "left", "unit": p.Unit, "reverse": false},
			"rowsFrame":    map[string]any{"layout": "auto"},
			"tooltip":      map[string]any{"mode": "single", "yHistogram": true, "showColorScale": false},
			"legend":       map[string]any{"show": true},
			"filterValues": map[string]any{"le": 1e-9},
		}
	default:
		stacking := "none"
		if p.Stack {
			stacking = "normal"
		}
		defaults := map[string]any{
			"unit": p.Unit,
			"custom": map[string]any{
				"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never",
				"spanNulls": false, "stacking": map[string]any{"mode": stacking, "group": "A"},
			},
		}
		if !p.Signed {
			defaults["min"] = 0
		}
		m["fieldConfig"] = map[string]any{"defaults": defaults, "overrides": []any{}}
		m["options"] = map[string]any{
			"legend":  map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true, "calcs": []any{}},
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"},
		}
	}
	return m
}
