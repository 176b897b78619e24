//go:build integration

package main_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/testinfra"

	"github.com/sundialhq/sundial/services/worker/internal/app"
)

// startQuickly starts a worker in process and fails the test when that
// took longer than a few seconds: a component that is down is waited for
// in the background, never at start.
func (e *env) startQuickly(cfg app.Config) *app.Worker {
	e.t.Helper()
	t0 := time.Now()
	w := e.startInProcess(cfg)
	if took := time.Since(t0); took > 12*time.Second {
		e.t.Fatalf("the worker took %v to start", took)
	}
	return w
}

// notReady fails the test unless the named readiness check fails.
func notReady(t *testing.T, w *app.Worker, name, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Checks[name](ctx); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s readiness: %v, want not ready, saying %q", name, err, want)
	}
}

func ready(w *app.Worker, name string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return w.Checks[name](ctx) == nil
}

// A worker whose brokers do not answer starts, says so in its log and in
// its kafka readiness check, and when the brokers answer (a forwarder to
// the real ones opened at the address it was given) joins the group and
// fires without a restart.
func TestWorkerStartsWhileKafkaIsDownAndJoinsWhenItAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	addr := testinfra.UnusedAddr(t)
	cfg := e.config("w1")
	cfg.KafkaBrokers = addr
	w := e.startQuickly(cfg)
	notReady(t, w, "kafka", "waiting for kafka ["+addr+"]")
	if !strings.Contains(e.logs.String(), "kafka not reachable") {
		t.Fatalf("the log does not say the worker waits for kafka:\n%s", tail(e.logs.String(), 2000))
	}
	if !ready(w, "redis") {
		t.Fatal("redis not ready: only kafka is down")
	}

	testinfra.Forward(t, addr, testinfra.KafkaBrokers(t)[0])
	eventually(t, 60*time.Second, "kafka ready once it answers", func() bool { return ready(w, "kafka") })
	f := e.firing(uuid.Must(uuid.NewV7()), time.Now().Add(2*time.Second).Truncate(time.Millisecond), sundialv1.Priority_PRIORITY_MEDIUM)
	e.produce([]*sundialv1.Firing{f}, nil)
	eventually(t, 60*time.Second, "the firing at its target", func() bool { return len(e.sink.ofJob(f.GetJobId())) == 1 })
	if !strings.Contains(e.logs.String(), "kafka answers: joining the group") {
		t.Fatalf("the log does not say kafka came back:\n%s", tail(e.logs.String(), 2000))
	}
}

// A worker whose Postgres does not answer starts, and its postgres
// readiness check names it.
func TestWorkerStartsWhilePostgresIsDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	cfg := e.config("w1")
	cfg.PostgresDSN = "postgres://sundial@127.0.0.1:1/sundial?connect_timeout=2"
	w := e.startQuickly(cfg)
	notReady(t, w, "postgres", "127.0.0.1")
	if !ready(w, "redis") || !ready(w, "kafka") {
		t.Fatal("redis or kafka not ready: only postgres is down")
	}
	if !strings.Contains(e.logs.String(), "waiting for it\" err=\"postgres: ") {
		t.Fatalf("the log does not say postgres is down:\n%s", tail(e.logs.String(), 2000))
	}
}

// A worker whose Redis does not answer starts, says so, and is ready once
// a Redis started later at that address answers, without a restart.
func TestWorkerStartsWhileRedisIsDownAndIsReadyWhenItAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	addr := testinfra.UnusedAddr(t)
	cfg := e.config("w1")
	cfg.RedisAddr = addr
	w := e.startQuickly(cfg)
	notReady(t, w, "redis", "connect")
	if !strings.Contains(e.logs.String(), "waiting for it") {
		t.Fatalf("the log does not say the worker waits for redis:\n%s", tail(e.logs.String(), 2000))
	}
	testinfra.StartRedis(t, addr)
	eventually(t, 30*time.Second, "redis ready once it answers", func() bool { return ready(w, "redis") })
}
