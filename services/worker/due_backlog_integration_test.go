//go:build integration

package main_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/app"
)

// gathered sums the samples of a metric family in reg whose labels
// include match.
func gathered(t *testing.T, reg *prometheus.Registry, name string, match map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	found := false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue metrics
				}
			}
			found = true
			sum += m.GetGauge().GetValue()
		}
	}
	return sum, found
}

// startWithRegistry runs a worker in the test process registering its
// metrics with reg, so the test reads the lag exporter's gauges.
func (e *env) startWithRegistry(cfg app.Config, reg *prometheus.Registry) *app.Worker {
	e.t.Helper()
	logger := slog.New(slog.NewTextHandler(testWriter{e.t, cfg.WorkerID, e.logs}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := app.New(ctx, cfg, app.Deps{}, logger, reg)
	if err != nil {
		e.t.Fatal(err)
	}
	var g lifecycle.Group
	g.Add(w.Services...)
	if err := g.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(g.Stop)
	return w
}

// The due backlog the Helm chart scales on, through a real worker on the
// real components: 0 while hundreds of firings are held ahead of their
// instant (the group's lag counts every one of them), then the firings
// past their instant waiting for an executor while a hanging target holds
// every executor, and 0 again once the target answers.
func TestDueBacklogCountsOnlyFiringsPastTheirInstant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	cfg := e.config("w1")
	cfg.Executors, cfg.CriticalExecutors = 4, 0
	cfg.StagingWindow = 2 * time.Minute
	cfg.LagInterval = time.Second
	reg := prometheus.NewRegistry()
	w := e.startWithRegistry(cfg, reg)
	group := map[string]string{"group": e.group}
	ready := map[string]string{"group": e.group, "source": "ready"}
	kafka := map[string]string{"group": e.group, "source": "kafka"}

	// readAfter waits for the exporter's next read after now (every
	// second here, --lag-interval).
	readAfter := func(what string) {
		t.Helper()
		since := float64(time.Now().UnixMilli()) / 1000
		eventually(t, 30*time.Second, what, func() bool {
			v, _ := gathered(t, reg, "sundial_worker_group_lag_updated_timestamp_seconds", group)
			return v > since
		})
	}

	// 400 firings due 30–40 s from now, on the four priority topics.
	held := e.schedule(40, 10, time.Now().Add(30*time.Second))
	e.produce(held, nil)
	eventually(t, 30*time.Second, "400 firings held", func() bool { return w.Holder.Len() >= len(held) })
	readAfter("a read with the firings held")
	lag, _ := gathered(t, reg, "sundial_worker_group_lag_records", group)
	r, okR := gathered(t, reg, "sundial_worker_due_backlog_firings", ready)
	k, okK := gathered(t, reg, "sundial_worker_due_backlog_firings", kafka)
	t.Logf("held ahead: held %d, group lag %v, due backlog ready %v kafka %v", w.Holder.Len(), lag, r, k)
	if !okR || !okK {
		t.Fatal("no sundial_worker_due_backlog_firings series")
	}
	if lag < float64(len(held)) {
		t.Errorf("group lag %v with %d firings held and uncommitted", lag, len(held))
	}
	if r != 0 || k != 0 {
		t.Errorf("due backlog with every firing held ahead: ready %v, kafka %v; want 0", r, k)
	}

	// A target that hangs: 40 CRITICAL firings due in a second, 4
	// executors. Four hang, the rest are due and wait.
	job := uuid.Must(uuid.NewV7())
	base := time.Now().Add(time.Second)
	var hung []*sundialv1.Firing
	release := make(chan struct{})
	letGo := sync.OnceFunc(func() { close(release) })
	t.Cleanup(letGo)
	e.sink.mu.Lock()
	for i := range 40 {
		f := e.firing(job, base.Add(time.Duration(i)*time.Millisecond), sundialv1.Priority_PRIORITY_CRITICAL)
		hung = append(hung, f)
		e.sink.hold[f.GetExecutionId()] = release
	}
	e.sink.mu.Unlock()
	e.produce(hung, nil)
	var peak float64
	eventually(t, 30*time.Second, "the due backlog counts the firings waiting behind the hanging target", func() bool {
		r, _ := gathered(t, reg, "sundial_worker_due_backlog_firings", ready)
		peak = max(peak, r)
		return r >= float64(len(hung)-cfg.Executors)
	})
	lag, _ = gathered(t, reg, "sundial_worker_group_lag_records", group)
	k, _ = gathered(t, reg, "sundial_worker_due_backlog_firings", kafka)
	t.Logf("target hanging: held %d, group lag %v, due backlog ready %v kafka %v", w.Holder.Len(), lag, peak, k)

	letGo()
	eventually(t, 60*time.Second, "the hung firings answered", func() bool { return e.sink.distinct() >= len(hung) })
	readAfter("a read after the target answered")
	if r, _ := gathered(t, reg, "sundial_worker_due_backlog_firings", ready); r != 0 {
		t.Errorf("due backlog after the backlog drained: %v, want 0", r)
	}
}

// The Kafka part of the due backlog through a real worker: a backlog the
// worker does not fetch (its HIGH topic paused at --max-held while a
// hanging target holds its executors) is counted from the broker once it
// is older than the staging window, so the gauge shows the whole backlog
// (ready queue + unfetched) and not only what the worker holds.
func TestDueBacklogCountsTheBacklogLeftInKafka(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	cfg := e.config("w1")
	cfg.Executors, cfg.CriticalExecutors = 4, 0
	cfg.MaxHeld = 100
	// A short window, so records produced a few seconds ago are past it.
	cfg.StagingWindow = 2 * time.Second
	cfg.LagInterval = time.Second
	reg := prometheus.NewRegistry()
	e.startWithRegistry(cfg, reg)
	ready := map[string]string{"group": e.group, "source": "ready"}
	kafka := map[string]string{"group": e.group, "source": "kafka"}

	job := uuid.Must(uuid.NewV7())
	base := time.Now()
	release := make(chan struct{})
	letGo := sync.OnceFunc(func() { close(release) })
	t.Cleanup(letGo)
	const n = 400
	var fs []*sundialv1.Firing
	e.sink.mu.Lock()
	for i := range n {
		f := e.firing(job, base.Add(time.Duration(i)*time.Millisecond), sundialv1.Priority_PRIORITY_HIGH)
		fs = append(fs, f)
		e.sink.hold[f.GetExecutionId()] = release
	}
	e.sink.mu.Unlock()
	// The first 150 fill the worker past --max-held (one fetch may carry
	// them all); the HIGH topic pauses, and the other 250 wait in Kafka.
	const first = 150
	e.produce(fs[:first], nil)
	eventually(t, 30*time.Second, "the first firings due and waiting", func() bool {
		r, _ := gathered(t, reg, "sundial_worker_due_backlog_firings", ready)
		return r >= first-3
	})
	e.produce(fs[first:], nil)

	// HIGH may occupy 3 of the 4 executors: the rest is due and either in
	// the ready queue or, past --max-held, left in Kafka.
	var r, k float64
	eventually(t, 40*time.Second, "the due backlog counts the backlog left in Kafka", func() bool {
		r, _ = gathered(t, reg, "sundial_worker_due_backlog_firings", ready)
		k, _ = gathered(t, reg, "sundial_worker_due_backlog_firings", kafka)
		return k > 0 && r+k >= n-3
	})
	t.Logf("backlog of %d behind a hanging target, --max-held %d: due backlog ready %v + kafka %v = %v", n, cfg.MaxHeld, r, k, r+k)
	if r > first {
		t.Errorf("ready %v: the worker fetched past --max-held", r)
	}
	if r+k > n {
		t.Errorf("due backlog %v over the %d firings produced", r+k, n)
	}
	letGo()
}
