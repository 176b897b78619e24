package prefetch

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/services/prefetcher/internal/stage"
)

// Metrics are the prefetcher's Prometheus series.
type Metrics struct {
	// Leader is 1 while this process stages for at least one range (led
	// and not fenced): the group's child of
	// sundial_prefetcher_leader{election}.
	Leader prometheus.Gauge
	// Epoch of the range term this process began last.
	Epoch         prometheus.Gauge
	TickDuration  prometheus.Histogram
	JobsClaimed   prometheus.Counter
	SlotsStaged   *prometheus.CounterVec
	Duplicates    prometheus.Counter
	SlotsSkipped  *prometheus.CounterVec
	SkipsRecorded prometheus.Counter
	JobsCompleted prometheus.Counter
	CatchUpRate   prometheus.Gauge
	// CatchUpHorizon is how far ahead of the database clock the last
	// paced catch-up firing is released.
	CatchUpHorizon prometheus.Gauge
	Unschedulable  prometheus.Counter
	Lag            prometheus.Histogram
	Fenced         prometheus.Counter
	Errors         prometheus.Counter
	// RangesLed is how many partition ranges this process leads.
	RangesLed prometheus.Gauge
	// Ranges is how many ranges the partitions are cut into (--ranges):
	// what every prefetcher's RangesLed should sum to, so a range nobody
	// leads can be alerted on.
	Ranges prometheus.Gauge
}

// NewMetrics registers the series on reg. election (the range group's
// path) labels the leader gauge, so dashboards count leaders per group once
// several prefetcher deployments share a Prometheus.
func NewMetrics(reg prometheus.Registerer, election string) *Metrics {
	leaders := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sundial_prefetcher_leader", Help: "1 while this prefetcher stages for at least one partition range it leads (and is not fenced).",
	}, []string{"election"})
	m := &Metrics{
		Leader: leaders.WithLabelValues(election),
		Epoch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_prefetcher_leader_epoch", Help: "Fencing epoch (range lock czxid) of the range term this prefetcher began last.",
		}),
		TickDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sundial_prefetcher_tick_duration_seconds", Help: "Duration of one prefetch pass (all its batches).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		JobsClaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_prefetcher_jobs_claimed_total", Help: "Jobs claimed and advanced.",
		}),
		SlotsStaged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_prefetcher_slots_staged_total", Help: "Outbox rows written, by kind (on_time, catch_up).",
		}, []string{"kind"}),
		Duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_prefetcher_slots_duplicate_total", Help: "Slots whose outbox row already existed (restaged after a takeover).",
		}),
		SlotsSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_prefetcher_slots_skipped_total",
			Help: "Slots not staged, by reason: expired (older than the misfire grace) or policy (inside the grace, not replayed by the misfire policy).",
		}, []string{"reason"}),
		SkipsRecorded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_prefetcher_skip_records_total", Help: "ledger_pending rows written for skipped slots (one per listed slot, one per summary).",
		}),
		JobsCompleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_prefetcher_jobs_completed_total", Help: "Jobs the prefetcher completed because their last slots were skipped.",
		}),
		CatchUpRate: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_prefetcher_catch_up_rate", Help: "Configured release rate of catch-up firings, per second (0: not paced).",
		}),
		CatchUpHorizon: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_prefetcher_catch_up_horizon_seconds", Help: "How far past the database clock the last paced catch-up firing is released (0: none pending).",
		}),
		Unschedulable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_prefetcher_jobs_unschedulable_total", Help: "Jobs whose spec or schedule could not be evaluated (next_fire_at cleared).",
		}),
		Lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sundial_prefetcher_lag_seconds",
			Help:    "How long the oldest claimed job of a batch had been due for staging (now()+window - next_fire_at); above the window, slots were staged late.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600},
		}),
		Fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_prefetcher_fenced_total", Help: "Transactions refused because a newer leader epoch had written.",
		}),
		Errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_prefetcher_errors_total", Help: "Prefetch passes that failed (retried next tick).",
		}),
		RangesLed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_prefetcher_ranges_led", Help: "Partition ranges this prefetcher leads (--ranges).",
		}),
		Ranges: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_prefetcher_ranges", Help: "Ranges the job partitions are cut into (--ranges; 1: one leader stages every partition).",
		}),
	}
	reg.MustRegister(leaders, m.Epoch, m.TickDuration, m.JobsClaimed, m.SlotsStaged,
		m.Duplicates, m.SlotsSkipped, m.SkipsRecorded, m.JobsCompleted, m.CatchUpRate, m.CatchUpHorizon,
		m.Unschedulable, m.Lag, m.Fenced, m.Errors, m.RangesLed, m.Ranges)
	for _, r := range []string{"expired", "policy"} {
		m.SlotsSkipped.WithLabelValues(r)
	}
	return m
}

// ObserveRanges is the coordinator's OnChange hook.
func (m *Metrics) ObserveRanges(led int) { m.RangesLed.Set(float64(led)) }

func (m *Metrics) observe(r stage.Result) {
	m.JobsClaimed.Add(float64(r.Claimed))
	m.SlotsStaged.WithLabelValues("on_time").Add(float64(r.Staged - r.CatchUp))
	m.SlotsStaged.WithLabelValues("catch_up").Add(float64(r.CatchUp))
	m.Duplicates.Add(float64(r.Duplicates))
	m.SlotsSkipped.WithLabelValues("expired").Add(float64(r.Expired))
	m.SlotsSkipped.WithLabelValues("policy").Add(float64(r.Missed))
	m.SkipsRecorded.Add(float64(r.Recorded))
	m.JobsCompleted.Add(float64(r.Completed))
	if !r.Now.IsZero() {
		m.CatchUpHorizon.Set(max(r.CatchUpCursor.Sub(r.Now).Seconds(), 0))
	}
	m.Unschedulable.Add(float64(r.Unschedulable))
	if r.Claimed > 0 {
		m.Lag.Observe(r.Lag.Seconds())
	}
}
