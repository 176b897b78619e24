package daemon

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/config"
	"github.com/sundialhq/sundial/pkg/lifecycle"
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

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunServesAdminAndDrainsComponents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &component{stopped: make(chan struct{})}
	var logs syncBuffer
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

func TestRunFailsOnBuildError(t *testing.T) {
	err := Run(context.Background(), "test", Common{AdminAddr: "127.0.0.1:0", LogLevel: "info", LogFormat: "text", DrainTimeout: time.Second}, &syncBuffer{},
		func(context.Context, Env) ([]lifecycle.Service, error) { return nil, errors.New("no postgres") })
	if err == nil || !strings.Contains(err.Error(), "no postgres") {
		t.Fatalf("err = %v", err)
	}
}

func TestCommonValidate(t *testing.T) {
	var p config.Problems
	(&Common{AdminAddr: "", DrainTimeout: 0}).Validate(&p)
	err := p.Err()
	if err == nil || !strings.Contains(err.Error(), "admin-addr") || !strings.Contains(err.Error(), "drain-timeout") {
		t.Fatalf("err = %v", err)
	}
}
