package relay

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	depthTotal     prometheus.Gauge
	depthDue       prometheus.Gauge
	oldestDue      prometheus.Gauge
	published      *prometheus.CounterVec
	publishErrors  *prometheus.CounterVec
	publishLatency *prometheus.HistogramVec
	claimSize      prometheus.Histogram
	cycleErrors    *prometheus.CounterVec
	wakeups        *prometheus.CounterVec
	listening      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		depthTotal: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_relay_outbox_rows",
			Help: "Rows in the outbox, due or not (counted every --depth-total-interval).",
		}),
		depthDue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_relay_outbox_due_rows",
			Help: "Outbox rows whose publish_at has passed: the backlog waiting for a relay (counted every --depth-interval).",
		}),
		oldestDue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_relay_outbox_oldest_due_seconds",
			Help: "How long the oldest due outbox row has been due; alert on this, not on depth.",
		}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_relay_rows_published_total",
			Help: "Outbox rows acknowledged by Kafka and deleted, by priority.",
		}, []string{"priority"}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_relay_publish_errors_total",
			Help: "Records Kafka did not acknowledge (the rows stay for the next claim), by reason.",
		}, []string{"reason"}),
		publishLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sundial_relay_publish_latency_seconds",
			Help:    "From a row becoming publishable (publish_at, or staging if later) to Kafka's acknowledgement, by priority.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"priority"}),
		claimSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sundial_relay_claim_batch_rows",
			Help:    "Rows per non-empty claim; at --batch-size the relay is behind and loops without waiting.",
			Buckets: []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000},
		}),
		cycleErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_relay_cycle_errors_total",
			Help: "Claim cycles that failed on Postgres, by stage (claim, delete).",
		}, []string{"stage"}),
		wakeups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_relay_wakeups_total",
			Help: "Why the relay ran a claim after waiting: notify, poll or due (a staged row came due).",
		}, []string{"source"}),
		listening: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_relay_listening",
			Help: "1 while the LISTEN connection is subscribed; 0 means polling only.",
		}),
	}
	reg.MustRegister(m.depthTotal, m.depthDue, m.oldestDue, m.published, m.publishErrors,
		m.publishLatency, m.claimSize, m.cycleErrors, m.wakeups, m.listening)
	// Failure-only series exist at zero from the start, so dashboards and
	// alerts see a flat 0 on a healthy relay rather than no data. Kafka's
	// own error names (errorReason) join as they happen.
	for _, reason := range []string{"timeout", "canceled", "other"} {
		m.publishErrors.WithLabelValues(reason)
	}
	for _, stage := range []string{"claim", "delete"} {
		m.cycleErrors.WithLabelValues(stage)
	}
	return m
}
