// Package metrics defines the worker's Prometheus metrics in one place, so
// their names, labels and buckets are reviewed together.
package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/rollup"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// BatchBuckets are the buckets of the batch sizes (1 to the default 256).
var BatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}

// LatenessBuckets run from 0.5 ms to 60 s: the target is a p50 of 2 ms and
// a p99 of 10 ms, so the low end needs sub-millisecond resolution, and the
// high end shows an outage's backlog.
var LatenessBuckets = []float64{
	0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025,
	0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// Metrics are the worker's collectors.
type Metrics struct {
	// Lateness of a firing against its fire instant, by priority, stage and
	// tenant (see Tenant): "timer" when the holder released it, "target"
	// when the attempt started (after the lease), which is what the target
	// observes.
	Lateness *prometheus.HistogramVec
	// Firings by priority, outcome (succeeded, retry_scheduled, dead,
	// failed, fenced, duplicate, stale, lease_conflict, lease_error,
	// poison, overlap_skipped, overlap_waiting, rate_limited, cancelled) and
	// tenant.
	Firings *prometheus.CounterVec
	// LeaseConflicts counts firings whose lease another delivery held.
	LeaseConflicts prometheus.Counter
	// PrepareBatch observes the firings of each lease call of the prepare
	// stage, PrepareCall its duration.
	PrepareBatch prometheus.Histogram
	PrepareCall  prometheus.Histogram
	// SettleBatch observes the attempts of each marker call of the settle
	// stage.
	SettleBatch prometheus.Histogram
	// SettleYield observes how long a settle group waited for the due
	// firings to go out first (settle.StageConfig.Emptied).
	SettleYield prometheus.Histogram
	// LedgerYield observes how long the recorder held a group of records
	// back while due firings waited (recorder.Config.Emptied).
	LedgerYield prometheus.Histogram
	// ReadyDepth is the ready queue's depth by priority.
	ReadyDepth *prometheus.GaugeVec
	// Executing is the number of attempts in progress.
	Executing prometheus.Gauge
	// Lag is, per partition, the records the broker has that this worker
	// has not fetched yet (high watermark − next fetch offset).
	Lag *prometheus.GaugeVec
	// Uncommitted is, per partition, the records fetched but not yet
	// committable (held, executing, or behind one that is).
	Uncommitted *prometheus.GaugeVec
	// Assigned is the number of partitions this member owns.
	Assigned prometheus.Gauge
	// Commits by result (ok, error).
	Commits *prometheus.CounterVec
	// TakeoverPassed counts records a new owner of a partition passed
	// because its previous owner's commit said they were finished.
	TakeoverPassed prometheus.Counter
	// ClockOffset is the estimated database-minus-local clock offset.
	ClockOffset prometheus.Gauge
	// ClockRTT is the round trip of the sample behind the estimate.
	ClockRTT prometheus.Gauge
	// Procs is the GOMAXPROCS the worker runs with now (see --procs).
	Procs prometheus.Gauge
	// Evicted counts dead workers this worker took out of the group
	// (package evict).
	Evicted prometheus.Counter
	// LedgerWrites by result (ok, retry, fenced, invalid, dropped).
	LedgerWrites *prometheus.CounterVec

	// RetriesScheduled counts next attempts staged in the outbox, by
	// priority and the failure class that caused them.
	RetriesScheduled *prometheus.CounterVec
	// DeadLetters counts executions dead-lettered, by error class.
	DeadLetters *prometheus.CounterVec
	// PoisonRecords counts undecodable records on the fire topics, by what
	// became of them (dlq, dlq_error).
	PoisonRecords *prometheus.CounterVec
	// SettleErrors counts failed tries of settling writes, by step (retry,
	// dead_letter, dlq, complete); each is tried again.
	SettleErrors *prometheus.CounterVec
	// JobCompletions counts jobs completed after their last slot, by how
	// it ended.
	JobCompletions *prometheus.CounterVec
	// CompletionWait is how long the oldest job of the completer's last
	// statement had waited in job_completions.
	CompletionWait prometheus.Gauge
	// OverlapSkips counts executions skipped by their job's overlap policy.
	OverlapSkips *prometheus.CounterVec
	// OverlapWaits counts firings held back behind a running execution.
	OverlapWaits *prometheus.CounterVec
	// RateLimited counts firings held back by a limit (host rate or
	// concurrency, tenant quota).
	RateLimited prometheus.Counter
	// Breakers is the number of hosts whose circuit breaker is in a state
	// (open, half_open); closed ones are not tracked.
	Breakers *prometheus.GaugeVec
	// BreakerTransitions counts breaker state changes by new state.
	BreakerTransitions *prometheus.CounterVec
	// BreakerRejections counts attempts failed fast by an open breaker.
	BreakerRejections prometheus.Counter
	// LimitsFallbacks counts the cluster limits' Redis calls that failed
	// (the worker counts its limits alone for a while).
	LimitsFallbacks prometheus.Counter
	// RefusedAddresses counts connections refused by the outbound-address
	// policy, by reason (loopback, link_local, metadata, ...).
	RefusedAddresses *prometheus.CounterVec
	// Notifications counts completion notifications by result (ok, retry,
	// failed, refused, dropped).
	Notifications *prometheus.CounterVec

	// JobFirings and JobLateness are the per-job view: firings by outcome
	// and lateness at the target, labelled by job_id, for the watched jobs
	// only (--metrics-job-ids). Use Job, not these vectors, on the hot
	// path.
	JobFirings  *prometheus.CounterVec
	JobLateness *prometheus.HistogramVec

	// Rollup counts every outcome Count counts into the per-minute rollup
	// the console reads without Prometheus (package rollup); nil: none.
	Rollup *rollup.Rollup

	tenants tenantLabels
	// jobs holds the watched jobs' series by job id. Written in New only,
	// so every firing reads it without a lock.
	jobs map[string]*JobSeries
}

// DefaultMaxTenants is how many tenants get a label value of their own
// unless configured otherwise (--metrics-max-tenants).
const DefaultMaxTenants = 100

// Tenant values that are not a tenant's name.
const (
	// TenantOther stands for every tenant past the first maxTenants.
	TenantOther = "other"
	// TenantUnknown is the label of a firing whose tenant is not known
	// (an undecodable record).
	TenantUnknown = "unknown"
)

// Outcomes are the outcome label values of the firing metrics. A watched
// job's firing series are created at zero for each of them.
var Outcomes = []string{
	"succeeded", "retry_scheduled", "dead", "failed", "fenced", "duplicate", "stale",
	"lease_conflict", "lease_error", "poison", "overlap_skipped", "overlap_waiting", "rate_limited", "cancelled",
}

// New creates the collectors and registers them with reg. maxTenants
// bounds the tenant label: the first maxTenants tenants this worker sees
// are labelled by name, any later one as "other" (0: all are "other").
// watchedJobs are the job ids (canonical UUIDs, as firings carry them)
// that get per-job series; every other job adds none.
func New(reg prometheus.Registerer, maxTenants int, watchedJobs ...string) *Metrics {
	m := &Metrics{
		Lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sundial_worker_fire_lateness_seconds", Help: "Lateness of firings against their fire instant (database clock), by stage and tenant.",
			Buckets: LatenessBuckets,
		}, []string{"priority", "stage", "tenant"}),
		Firings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_firings_total", Help: "Firings handled, by outcome and tenant.",
		}, []string{"priority", "outcome", "tenant"}),
		LeaseConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_worker_lease_conflicts_total", Help: "Firings whose lease was held by another delivery.",
		}),
		PrepareBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sundial_worker_prepare_batch_firings", Help: "Firings leased ahead of their instant by one Redis call.",
			Buckets: BatchBuckets,
		}),
		PrepareCall: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sundial_worker_prepare_call_seconds", Help: "Duration of the prepare stage's lease calls.",
			Buckets: LatenessBuckets,
		}),
		SettleBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sundial_worker_settle_batch_attempts", Help: "Finished attempts whose markers one Redis call wrote.",
			Buckets: BatchBuckets,
		}),
		SettleYield: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sundial_worker_settle_yield_seconds", Help: "How long a group of finished attempts waited to be settled while due firings waited for an executor.",
			Buckets: LatenessBuckets,
		}),
		LedgerYield: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sundial_worker_ledger_yield_seconds", Help: "How long a group of ledger records was held back while due firings waited for an executor.",
			Buckets: LatenessBuckets,
		}),
		ReadyDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sundial_worker_ready_queue_depth", Help: "Due firings waiting for an executor.",
		}, []string{"priority"}),
		Executing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_worker_executing", Help: "Attempts in progress.",
		}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sundial_worker_consumer_lag_records", Help: "Records on the broker not yet fetched by this worker.",
		}, []string{"topic", "partition"}),
		Uncommitted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sundial_worker_uncommitted_records", Help: "Records fetched whose offsets cannot be committed yet.",
		}, []string{"topic", "partition"}),
		Assigned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_worker_assigned_partitions", Help: "Partitions of the priority topics this worker owns.",
		}),
		TakeoverPassed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_worker_takeover_passed_total", Help: "Records past the committed offset passed without work because the previous owner's commit said they were finished.",
		}),
		Commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_offset_commits_total", Help: "Offset commits, by result.",
		}, []string{"result"}),
		ClockOffset: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_worker_clock_offset_seconds", Help: "Estimated database clock minus local clock.",
		}),
		Procs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_worker_procs", Help: "GOMAXPROCS now: 1 at a light load, the CPU limit under a herd (--procs auto).",
		}),
		Evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_worker_group_evictions_total", Help: "Dead workers this worker took out of the consumer group when their liveness keys lapsed (--evict-dead).",
		}),
		ClockRTT: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_worker_clock_offset_rtt_seconds", Help: "Round trip of the sample behind the clock offset estimate.",
		}),
		LedgerWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_ledger_writes_total", Help: "Ledger writes, by result.",
		}, []string{"result"}),
		RetriesScheduled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_retries_scheduled_total", Help: "Next attempts staged in the outbox, by the failure class that caused them.",
		}, []string{"priority", "class"}),
		DeadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_dead_letters_total", Help: "Executions dead-lettered, by error class.",
		}, []string{"class"}),
		PoisonRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_poison_records_total", Help: "Undecodable records on the fire topics, by what became of them.",
		}, []string{"result"}),
		SettleErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_settle_errors_total", Help: "Failed tries of writes that settle an attempt (each is tried again), by step.",
		}, []string{"step"}),
		JobCompletions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_job_completions_total", Help: "Jobs completed after their last slot, by how the slot ended.",
		}, []string{"outcome"}),
		CompletionWait: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_worker_completion_wait_seconds", Help: "How long the oldest job the completer's last statement completed had been queued after its last slot settled (0: the queue was empty).",
		}),
		OverlapSkips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_overlap_skips_total", Help: "Executions skipped because another execution of the job was running, by overlap policy.",
		}, []string{"policy"}),
		OverlapWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_overlap_waits_total", Help: "Firings held back behind a running execution of their job, by overlap policy.",
		}, []string{"policy"}),
		RateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_worker_rate_limited_total", Help: "Firings held back by a limit: their target host's rate or concurrency, or their tenant's firing-rate quota (the firings counter's outcome says which).",
		}),
		Breakers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sundial_worker_circuit_breakers", Help: "Target hosts whose circuit breaker is open or half-open.",
		}, []string{"state"}),
		BreakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_circuit_breaker_transitions_total", Help: "Circuit breaker state changes, by new state.",
		}, []string{"to"}),
		BreakerRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_worker_circuit_breaker_rejections_total", Help: "Attempts failed fast by an open circuit breaker.",
		}),
		LimitsFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_worker_limits_fallbacks_total", Help: "Redis calls of the cluster limits that failed; each worker then counts its limits alone for --limits-fallback.",
		}),
		RefusedAddresses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_refused_addresses_total", Help: "Outbound connections refused by the address policy, by reason.",
		}, []string{"reason"}),
		Notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_notifications_total", Help: "Completion notifications, by result.",
		}, []string{"result"}),
		JobFirings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_worker_job_firings_total", Help: "Firings of the watched jobs (--metrics-job-ids) handled, by job and outcome.",
		}, []string{"job_id", "outcome"}),
		JobLateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sundial_worker_job_lateness_seconds", Help: "Lateness at the target of the watched jobs' attempts (--metrics-job-ids), by job.",
			Buckets: LatenessBuckets,
		}, []string{"job_id"}),
	}
	reg.MustRegister(m.Lateness, m.Firings, m.LeaseConflicts, m.PrepareBatch, m.PrepareCall, m.SettleBatch, m.SettleYield, m.LedgerYield, m.ReadyDepth, m.Executing, m.Lag, m.Uncommitted, m.TakeoverPassed,
		m.Assigned, m.Commits, m.ClockOffset, m.ClockRTT, m.Procs, m.Evicted, m.LedgerWrites,
		m.RetriesScheduled, m.DeadLetters, m.PoisonRecords, m.SettleErrors, m.JobCompletions, m.CompletionWait, m.OverlapSkips, m.OverlapWaits,
		m.RateLimited, m.Breakers, m.BreakerTransitions, m.BreakerRejections, m.LimitsFallbacks, m.RefusedAddresses, m.Notifications,
		m.JobFirings, m.JobLateness)
	m.tenants.max = max(maxTenants, 0)
	empty := map[string]struct{}{}
	m.tenants.seen.Store(&empty)
	m.jobs = make(map[string]*JobSeries, len(watchedJobs))
	for _, id := range watchedJobs {
		if _, ok := m.jobs[id]; ok || id == "" {
			continue
		}
		// Every series of a watched job exists from the start, at zero,
		// so its dashboard shows 0 rather than "no data" before it fires
		// (or while it never fails).
		j := &JobSeries{id: id, vec: m.JobFirings, Lateness: m.JobLateness.WithLabelValues(id),
			firings: make(map[string]prometheus.Counter, len(Outcomes))}
		for _, o := range Outcomes {
			j.firings[o] = m.JobFirings.WithLabelValues(id, o)
		}
		m.jobs[id] = j
	}
	return m
}

// Job returns the series of job id if it is watched, else nil. It runs for
// every firing: one lookup in a map that does not change, no allocation.
func (m *Metrics) Job(id string) *JobSeries {
	if len(m.jobs) == 0 {
		return nil
	}
	return m.jobs[id]
}

// JobSeries are one watched job's series, bound to its job_id once so a
// firing of it costs a map lookup, not a label hash.
type JobSeries struct {
	// Lateness observes the attempt's start minus its fire instant (the
	// target stage of sundial_worker_fire_lateness_seconds).
	Lateness prometheus.Observer

	id      string
	vec     *prometheus.CounterVec
	firings map[string]prometheus.Counter
}

// Fired counts one firing of the job with outcome.
func (j *JobSeries) Fired(outcome string) {
	if c, ok := j.firings[outcome]; ok {
		c.Inc()
		return
	}
	// An outcome missing from Outcomes: still counted, only slower.
	j.vec.WithLabelValues(j.id, outcome).Inc()
}

// Tenant is the tenant label value for tenant: its name while fewer than
// maxTenants distinct tenants have been labelled, else "other". A worker
// sees the tenants of its partitions, which are configured on the api, so
// the cap is a guard against a misconfiguration (or a bug) turning the
// label into one series per job, not a limit to reach in normal use.
// Lock-free once a tenant has been seen: it runs for every firing.
func (m *Metrics) Tenant(tenant string) string {
	if tenant == "" {
		return TenantUnknown
	}
	return m.tenants.label(tenant)
}

// tenantLabels remembers which tenants have a label of their own. The set
// is copied on write: it grows at most maxTenants times, and reads (every
// firing) take no lock.
type tenantLabels struct {
	max  int
	mu   sync.Mutex
	seen atomic.Pointer[map[string]struct{}]
}

func (l *tenantLabels) label(t string) string {
	seen := *l.seen.Load()
	if _, ok := seen[t]; ok {
		return t
	}
	if len(seen) >= l.max {
		return TenantOther
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	seen = *l.seen.Load()
	if _, ok := seen[t]; ok {
		return t
	}
	if len(seen) >= l.max {
		return TenantOther
	}
	next := make(map[string]struct{}, len(seen)+1)
	for k := range seen {
		next[k] = struct{}{}
	}
	next[t] = struct{}{}
	l.seen.Store(&next)
	return t
}

// LedgerThrottle registers the recorder's write throttle: the rate of
// records it allows Cassandra now (following the node's latency and
// errors) and the records being written. What it spills is counted in
// sundial_worker_ledger_writes_total{result="spilled"}.
func LedgerThrottle(reg prometheus.Registerer, rate func() float64, inFlight func() int) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sundial_worker_ledger_allowed_rate", Help: "Ledger records per second the recorder's throttle allows now (it follows Cassandra's latency and errors).",
		}, rate),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sundial_worker_ledger_in_flight_records", Help: "Ledger records being written to Cassandra.",
		}, func() float64 { return float64(inFlight()) }),
	)
}

// ExecutorIdle registers the executor time spent waiting while a firing
// that could have started waited in the ready queue (readyq's
// IdleWhileDue): near zero when the executors are busy whenever due
// firings wait, which is what it is there to show.
func ExecutorIdle(reg prometheus.Registerer, idle func() time.Duration) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sundial_worker_executor_idle_while_due_seconds_total",
		Help: "Executor-seconds spent waiting for work while a firing that could have started waited in the ready queue (firings held back by their priority's executor cap not counted).",
	}, func() float64 { return idle().Seconds() }))
}

// Held registers a gauge of the firings held for later, read from f.
func Held(reg prometheus.Registerer, f func() int) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sundial_worker_held_firings", Help: "Firings held in memory until their instant.",
	}, func() float64 { return float64(f()) }))
}

// Admission registers the prepare stage's admission gauges: the firings
// due and not leased yet (held back while the executors are behind), and
// the rate the executors were last seen to drain the ready queue at.
func Admission(reg prometheus.Registerer, waiting func() int, rate func() float64) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sundial_worker_unleased_due_firings", Help: "Firings whose prepare instant has come that are not leased yet: admission holds them back until the executors can fire them within their lease.",
	}, func() float64 { return float64(waiting()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sundial_worker_drain_rate", Help: "Firings per second the executors take from the ready queue, as the prepare stage's admission last estimated it.",
	}, rate))
}

// Count counts one outcome of a firing (sundial_worker_firings_total, and
// its job's series when the job is watched) and notes it on the firing's
// trace: every stage counts through it.
func (m *Metrics) Count(it *work.Item, f *sundialv1.Firing, outcome string) {
	if j := m.Job(f.GetJobId()); j != nil {
		j.Fired(outcome)
	}
	m.Firings.WithLabelValues(firing.PriorityName(f.GetPriority()), outcome, m.Tenant(f.GetTenant())).Inc()
	m.Rollup.Outcome(f.GetTenant(), f.GetPriority(), outcome)
	if it != nil && it.Trace != nil {
		it.Trace.Consume.SetAttributes(tracing.AttrOutcome.String(outcome))
	}
}
