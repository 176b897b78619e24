package deploytest

import (
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// dueMetric is the per-worker gauge of firings past their instant not
// started (services/worker/internal/lagexporter), and rateMetric the
// firing rate prometheus-adapter serves from sundial_worker_firings_total:
// what autoscaling.signal=due scales on.
const (
	dueMetric  = "sundial_worker_due_backlog_firings"
	rateMetric = "sundial_worker_firings_per_second"
)

// autoscalingOf reads autoscaling.mode and .signal from a ci values file
// (the chart's defaults where it sets none: none, due).
func autoscalingOf(t *testing.T, name string) (mode, signal string) {
	t.Helper()
	b, err := os.ReadFile(valuesFiles(t)[name])
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Autoscaling struct{ Mode, Signal string }
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	mode, signal = v.Autoscaling.Mode, v.Autoscaling.Signal
	if mode == "" {
		mode = "none"
	}
	if signal == "" {
		signal = "due"
	}
	return mode, signal
}

// checkDueAutoscaling: with signal due, the autoscaler reads the due
// backlog of the workers' group (and the firing rate), never the lag.
func checkDueAutoscaling(t *testing.T, name, mode, group string, dep object, scaled, hpas []object, hasReplicas bool) {
	t.Helper()
	switch mode {
	case "keda":
		if len(scaled) != 1 || len(hpas) != 0 || hasReplicas {
			t.Fatalf("%s: want one ScaledObject, no HPA, and no replicas on the Deployment", name)
		}
		so := scaled[0]
		if str(dig(so, "spec", "scaleTargetRef", "name")) != dep.name() {
			t.Errorf("the ScaledObject scales %v, not the worker Deployment", dig(so, "spec", "scaleTargetRef", "name"))
		}
		var queries []string
		for _, tr := range list(dig(so, "spec", "triggers")) {
			if ty := str(dig(tr, "type")); ty != "prometheus" {
				t.Errorf("%s: trigger type %s; signal due reads Prometheus, not the Kafka lag", name, ty)
			}
			if str(dig(tr, "metadata", "serverAddress")) == "" {
				t.Errorf("%s: a Prometheus trigger without serverAddress", name)
			}
			if _, err := strconv.ParseFloat(str(dig(tr, "metadata", "threshold")), 64); err != nil {
				t.Errorf("%s: threshold %v is not a number", name, dig(tr, "metadata", "threshold"))
			}
			queries = append(queries, str(dig(tr, "metadata", "query")))
		}
		if len(queries) == 0 || !strings.Contains(queries[0], dueMetric) || !strings.Contains(queries[0], `group="`+group+`"`) {
			t.Errorf("%s: the first trigger's query %q does not read %s of group %s", name, queries, dueMetric, group)
		}
		for _, q := range queries {
			if strings.Contains(q, lagMetric) {
				t.Errorf("%s: signal due reads the lag: %s", name, q)
			}
		}
	case "hpa":
		if len(hpas) != 1 || len(scaled) != 0 || hasReplicas {
			t.Fatalf("%s: want one HPA, no ScaledObject, and no replicas on the Deployment", name)
		}
		h := hpas[0]
		if str(dig(h, "spec", "scaleTargetRef", "name")) != dep.name() {
			t.Errorf("the HPA scales %v, not the worker Deployment", dig(h, "spec", "scaleTargetRef", "name"))
		}
		metrics := list(dig(h, "spec", "metrics"))
		if len(metrics) == 0 || str(dig(metrics[0], "external", "metric", "name")) != dueMetric {
			t.Fatalf("%s: HPA metrics %v: want the External metric %s first", name, metrics, dueMetric)
		}
		if g := str(dig(metrics[0], "external", "metric", "selector", "matchLabels", "group")); g != group {
			t.Errorf("HPA selects group %q, the workers are in %q", g, group)
		}
		for _, m := range metrics {
			if n := str(dig(m, "external", "metric", "name")); n == lagMetric {
				t.Errorf("%s: signal due reads %s", name, n)
			}
		}
	}
}

// hpaTolerance is the HorizontalPodAutoscaler's default: a usage ratio
// within 10 % of 1 changes nothing (kube-controller-manager
// --horizontal-pod-autoscaler-tolerance).
const hpaTolerance = 0.1

// desiredReplicas is what the HPA controller computes for one External
// metric with an AverageValue target (KEDA's triggers are the same: a
// ScaledObject becomes an HPA with one External AverageValue metric per
// trigger): usage ratio = total / (target × current); inside the
// tolerance keep current, else ceil(ratio × current) = ceil(total/target).
func desiredReplicas(current int, total, target float64) int {
	ratio := total / (target * float64(current))
	if math.Abs(ratio-1) <= hpaTolerance {
		return current
	}
	return int(math.Ceil(ratio * float64(current)))
}

// decide is the HPA's decision over all its metrics: the largest desired
// count, clamped to [min, max] (the behavior policies then pace the
// change; they do not change its direction).
func decide(current, lo, hi int, metrics map[string]float64, targets map[string]float64) int {
	want := 0
	for name, target := range targets {
		want = max(want, desiredReplicas(current, metrics[name], target))
	}
	return min(max(want, lo), hi)
}

// hpaTargets reads the rendered HPA: its replica bounds and the
// AverageValue target of each External metric, by metric name.
func hpaTargets(t *testing.T, h object) (lo, hi int, targets map[string]float64) {
	t.Helper()
	lo, _ = dig(h, "spec", "minReplicas").(int)
	hi, _ = dig(h, "spec", "maxReplicas").(int)
	targets = map[string]float64{}
	for _, m := range list(dig(h, "spec", "metrics")) {
		v, err := strconv.ParseFloat(str(dig(m, "external", "target", "averageValue")), 64)
		if err != nil {
			t.Fatalf("metric %v: averageValue: %v", m, err)
		}
		targets[str(dig(m, "external", "metric", "name"))] = v
	}
	return lo, hi, targets
}

// TestScalerDecision renders the chart's HPA with each signal and applies
// the HPA controller's formula to the metrics of three situations a worker
// group meets, with the figures the workers export in each (the due
// backlog behaves as services/worker/internal/lagexporter's
// TestDueBacklogIsNotLag drives it through a broker: 0 for firings held
// ahead, the overdue records and the ready queue otherwise):
//
//   - steady: 3 workers fire 1,200 firings/s on time. Together they hold
//     the staging window ahead (1,200 × 130 s = 156,000 uncommitted
//     records); nothing is past its instant.
//   - herd staged: the same, plus 600,000 firings due at 00:00, staged and
//     held from 23:58. Nothing is due yet.
//   - overdue: the targets slowed down and the workers fire 900/s of the
//     1,200/s: 30,000 firings past their instant wait in the ready queues
//     and in Kafka, on top of the held window.
//
// The lag signal reads the held firings as demand: it scales to the
// maximum two minutes before a herd is due (a rebalance as the herd is
// about to fire, for firings the workers may well fire in time), and a
// real backlog is a small part of what it sees. The due signal keeps the
// workers the firing rate needs while they keep up, and adds workers for
// work past its instant.
func TestScalerDecision(t *testing.T) {
	def := valuesFiles(t)["default"]
	const current = 3
	type situation struct {
		name    string
		metrics map[string]float64
	}
	situations := []situation{
		{"steady", map[string]float64{lagMetric: 1200 * 130, dueMetric: 0, rateMetric: 1200}},
		{"herd staged", map[string]float64{lagMetric: 1200*130 + 600000, dueMetric: 0, rateMetric: 1200}},
		{"overdue", map[string]float64{lagMetric: 1200*130 + 30000, dueMetric: 30000, rateMetric: 900}},
	}
	decisions := map[string]map[string]int{}
	for _, signal := range []string{"due", "lag"} {
		objs, err := render(t, def, "autoscaling.mode=hpa", "autoscaling.signal="+signal)
		if err != nil {
			t.Fatal(err)
		}
		hpas := byKind(objs, "HorizontalPodAutoscaler")
		if len(hpas) != 1 {
			t.Fatalf("signal %s: %d HPAs", signal, len(hpas))
		}
		lo, hi, targets := hpaTargets(t, hpas[0])
		decisions[signal] = map[string]int{}
		for _, s := range situations {
			d := decide(current, lo, hi, s.metrics, targets)
			decisions[signal][s.name] = d
			t.Logf("signal %s, %s (targets %v): %d workers → %d", signal, s.name, targets, current, d)
		}
	}
	// Keeping up, whatever is held ahead: the due signal asks for what the
	// rate needs (1,200/s at 460 per worker: 3), no scale-up.
	for _, sit := range []string{"steady", "herd staged"} {
		if d := decisions["due"][sit]; d != current {
			t.Errorf("due signal, %s (nothing past its instant): %d workers, want %d", sit, d, current)
		}
	}
	// The lag signal scales up on firings that are only held.
	if d := decisions["lag"]["herd staged"]; d <= current {
		t.Errorf("lag signal, herd staged: %d workers; expected a scale-up on held firings (the flaw the due signal fixes)", d)
	}
	// Overdue: the due signal scales up, by the backlog over the
	// threshold, and further than the lag signal, for which the backlog is
	// a sixth of what it counts.
	if d := decisions["due"]["overdue"]; d <= current || d <= decisions["lag"]["overdue"] {
		t.Errorf("30,000 firings overdue: due signal %d workers, lag signal %d; want the due signal to scale up, further", d, decisions["lag"]["overdue"])
	}

	// The same through KEDA: its Prometheus triggers carry the same
	// thresholds, and KEDA hands them to its HPA as AverageValue targets.
	objs, err := render(t, def, "autoscaling.mode=keda", "autoscaling.keda.prometheus.serverAddress=http://prom:9090")
	if err != nil {
		t.Fatal(err)
	}
	so := byKind(objs, "ScaledObject")
	if len(so) != 1 {
		t.Fatalf("%d ScaledObjects", len(so))
	}
	targets := map[string]float64{}
	for _, tr := range list(dig(so[0], "spec", "triggers")) {
		v, err := strconv.ParseFloat(str(dig(tr, "metadata", "threshold")), 64)
		if err != nil {
			t.Fatal(err)
		}
		q := str(dig(tr, "metadata", "query"))
		switch {
		case strings.Contains(q, dueMetric):
			targets[dueMetric] = v
		case strings.Contains(q, "sundial_worker_firings_total"):
			targets[rateMetric] = v
		default:
			t.Errorf("unexpected trigger query %q", q)
		}
	}
	lo, _ := dig(so[0], "spec", "minReplicaCount").(int)
	hi, _ := dig(so[0], "spec", "maxReplicaCount").(int)
	for _, s := range situations {
		if d := decide(current, lo, hi, s.metrics, targets); d != decisions["due"][s.name] {
			t.Errorf("KEDA, %s: %d workers, the HPA %d", s.name, d, decisions["due"][s.name])
		}
	}
}

func TestDesiredReplicasIsTheHPAFormula(t *testing.T) {
	for _, tc := range []struct {
		current       int
		total, target float64
		want          int
	}{
		{3, 0, 2000, 0},           // nothing due: as few as the bounds allow
		{3, 6000, 2000, 3},        // exactly on target
		{3, 6500, 2000, 3},        // within the 10 % tolerance
		{3, 30000, 2000, 15},      // ceil(30000/2000)
		{3, 156000, 60000, 3},     // ratio 0.87: outside tolerance, ceil(2.6)
		{4, 1200, 460, 3},         // ceil(2.6)
		{2, 4001, 2000, 2},        // ratio 1.0003: within tolerance
		{10, 100, 2000, 1},        // scale-down to what is asked
		{1, 2000 * 1.05, 2000, 1}, // within tolerance at one replica
	} {
		if got := desiredReplicas(tc.current, tc.total, tc.target); got != tc.want {
			t.Errorf("desiredReplicas(%d, %v, %v) = %d, want %d", tc.current, tc.total, tc.target, got, tc.want)
		}
	}
}
