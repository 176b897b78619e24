package daemon

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	"github.com/sundialhq/sundial/testkit/logbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type component struct {
	lifecycle.Runner
	stopped chan struct{}
}

func (c *component) Start(context.Context) error {
	return c.Run(func(ctx context.Context) error {
		<-ctx.Done()
		close(c.stopped)
		return nil
	})
}

func TestRunServesAdminAndDrainsComponents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &component{stopped: make(chan struct{})}
	var logs logbuf.Buffer
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, "test", Common{AdminAddr: "127.0.0.1:0", LogLevel: "info", LogFormat: "json", DrainTimeout: 5 * time.Second}, &logs,
			func(_ context.Context, env Env) ([]lifecycle.Service, error) {
				go func() {
					// Addr is known once the admin server has started, which
					// Run does before the components; poll for it.
					for env.Admin.Addr() == "127.0.0.1:0" {
						time.Sleep(time.Millisecond)
					}
					ready <- env.Admin.Addr()
				}()
				return []lifecycle.Service{c}, nil
			})
	}()
	addr := <-ready
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz never answered: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.stopped:
	default:
		t.Fatal("component was not stopped")
	}
	if !strings.Contains(logs.String(), `"msg":"draining"`) || !strings.Contains(logs.String(), `"service":"test"`) {
		t.Fatalf("logs = %s", logs.String())
	}
}

// failing is a component whose loop fails on its own once told to.
type failing struct {
	lifecycle.Runner
	fail chan struct{}
}

func (f *failing) Start(context.Context) error {
	return f.Run(func(ctx context.Context) error {
		select {
		case <-f.fail:
			return errors.New("serve: accept: too many open files")
		case <-ctx.Done():
			return nil
		}
	})
}

func TestRunExitsWhenAComponentEndsOnItsOwn(t *testing.T) {
	healthy := &component{stopped: make(chan struct{})}
	broken := &failing{fail: make(chan struct{})}
	close(broken.fail)
	var logs logbuf.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- Run(context.Background(), "test", Common{AdminAddr: "127.0.0.1:0", LogLevel: "info", LogFormat: "json", DrainTimeout: 5 * time.Second}, &logs,
			func(context.Context, Env) ([]lifecycle.Service, error) {
				return []lifecycle.Service{healthy, broken}, nil
			})
	}()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "too many open files") {
			t.Fatalf("Run = %v, want the component's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run kept running with a dead component")
	}
	select {
	case <-healthy.stopped:
	default:
		t.Fatal("the healthy component was not drained")
	}
	if !strings.Contains(logs.String(), "a component stopped on its own") {
		t.Fatalf("logs = %s", logs.String())
	}
}

func TestRunFailsOnBuildError(t *testing.T) {
	err := Run(context.Background(), "test", Common{AdminAddr: "127.0.0.1:0", LogLevel: "info", LogFormat: "text", DrainTimeout: time.Second}, &logbuf.Buffer{},
		func(context.Context, Env) ([]lifecycle.Service, error) { return nil, errors.New("no postgres") })
	if err == nil || !strings.Contains(err.Error(), "no postgres") {
		t.Fatalf("err = %v", err)
	}
}

// TestRunFlushesSpansOnStop: with tracing on, build gets a tracer, and a
// span ended just before the drain reaches the collector before Run
// returns.
func TestRunFlushesSpansOnStop(t *testing.T) {
	posts := make(chan string, 8)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts <- r.URL.Path
	}))
	defer collector.Close()
	ctx, cancel := context.WithCancel(context.Background())
	c := Common{AdminAddr: "127.0.0.1:0", LogLevel: "info", LogFormat: "json", DrainTimeout: 5 * time.Second,
		Tracing: tracing.Config{Exporter: tracing.ExporterOTLPHTTP, Endpoint: collector.URL, SampleRatio: 1}}
	err := Run(ctx, "test", c, &logbuf.Buffer{}, func(_ context.Context, env Env) ([]lifecycle.Service, error) {
		tr := env.Tracing.Tracer("daemon-test")
		if tr == nil {
			return nil, errors.New("tracing on, but no tracer")
		}
		_, span := tr.Start(context.Background(), "build")
		span.End()
		cancel() // drain at once
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-posts:
		if p != "/v1/traces" {
			t.Fatalf("exporter posted to %s", p)
		}
	default:
		t.Fatal("the span was not flushed before Run returned")
	}
}

func TestRunWithTracingOffHasNoTracer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var tr any = "unset"
	err := Run(ctx, "test", Common{AdminAddr: "127.0.0.1:0", LogLevel: "info", LogFormat: "json", DrainTimeout: time.Second}, &logbuf.Buffer{},
		func(_ context.Context, env Env) ([]lifecycle.Service, error) {
			if t := env.Tracing.Tracer("x"); t != nil {
				tr = t
			} else {
				tr = nil
			}
			cancel()
			return nil, nil
		})
	if err != nil || tr != nil {
		t.Fatalf("err = %v, tracer = %v; want no tracer when tracing is off", err, tr)
	}
}

func TestCommonValidate(t *testing.T) {
	var p config.Problems
	(&Common{AdminAddr: "", DrainTimeout: 0, Tracing: tracing.Config{Exporter: "zipkin"}}).Validate(&p)
	err := p.Err()
	if err == nil || !strings.Contains(err.Error(), "admin-addr") || !strings.Contains(err.Error(), "drain-timeout") || !strings.Contains(err.Error(), "otel-exporter") {
		t.Fatalf("err = %v", err)
	}
}
