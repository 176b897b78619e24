package prefetch

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/pkg/leader"
	"github.com/sundialhq/sundial/services/prefetcher/internal/stage"
)

// Metrics are the prefetcher's Prometheus series.
type Metrics struct {
	// Leader is 1 while this process works a term (and has not been fenced).
	Leader prometheus.Gauge
	// Epoch of the current or last term.
	Epoch prometheus.Gauge
	// ElectionState is 1 for the elector's current state, 0 for the others.
	ElectionState *prometheus.GaugeVec
	TickDuration  prometheus.Histogram
	JobsClaimed   prometheus.Counter
	SlotsStaged   *prometheus.CounterVec
	Duplicates    prometheus.Counter
	SlotsMissed   prometheus.Counter
	Unschedulable prometheus.Counter
	Lag           prometheus.Histogram
	Fenced        prometheus.Counter
	Errors        prometheus.Counter
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_prefetcher_leader", Help: "1 while this prefetcher works a leadership term.",
		}),
		Epoch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_prefetcher_leader_epoch", Help: "Fencing epoch (candidate czxid) of the current or last term.",
		}),
		ElectionState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sundial_prefetcher_election_state", Help: "1 for the leader elector's current state.",
		}, []string{"state"}),
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
		SlotsMissed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_prefetcher_slots_missed_total", Help: "Missed slots inside the grace that the misfire policy did not stage.",
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
	}
	reg.MustRegister(m.Leader, m.Epoch, m.ElectionState, m.TickDuration, m.JobsClaimed, m.SlotsStaged,
		m.Duplicates, m.SlotsMissed, m.Unschedulable, m.Lag, m.Fenced, m.Errors)
	for _, s := range allStates {
		m.ElectionState.WithLabelValues(s.String()).Set(0)
	}
	m.ElectionState.WithLabelValues(leader.StateStopped.String()).Set(1)
	return m
}

var allStates = []leader.State{
	leader.StateStopped, leader.StateConnecting, leader.StateCampaigning,
	leader.StateFollowing, leader.StateLeading, leader.StateSuspect,
}

// ObserveElection is the elector's OnTransition hook.
func (m *Metrics) ObserveElection(from, to leader.State, _ int64) {
	m.ElectionState.WithLabelValues(from.String()).Set(0)
	m.ElectionState.WithLabelValues(to.String()).Set(1)
}

func (m *Metrics) observe(r stage.Result) {
	m.JobsClaimed.Add(float64(r.Claimed))
	m.SlotsStaged.WithLabelValues("on_time").Add(float64(r.Staged - r.CatchUp))
	m.SlotsStaged.WithLabelValues("catch_up").Add(float64(r.CatchUp))
	m.Duplicates.Add(float64(r.Duplicates))
	m.SlotsMissed.Add(float64(r.Missed))
	m.Unschedulable.Add(float64(r.Unschedulable))
	if r.Claimed > 0 {
		m.Lag.Observe(r.Lag.Seconds())
	}
}
