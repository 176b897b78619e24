// Package admin is the HTTP server every Sundial service exposes next to its
// real work: /healthz (the process is alive), /readyz (its dependencies
// answer and it is not draining), /metrics (Prometheus) and, when enabled,
// /debug/pprof.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// NewRegistry returns a Prometheus registry with the Go runtime and process
// collectors, so every service exports memory, GC and CPU figures.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Check reports whether one dependency is usable; nil means ready.
type Check func(ctx context.Context) error

// Server is the admin HTTP server. It implements lifecycle.Service.
type Server struct {
	addr     string
	logger   *slog.Logger
	registry *prometheus.Registry
	pprof    bool

	mu       sync.Mutex
	checks   map[string]Check
	draining atomic.Bool

	lnMu   sync.Mutex
	ln     net.Listener
	srv    *http.Server
	runner lifecycle.Runner
}

// New returns an admin server for addr (host:port; port 0 picks one).
func New(addr string, logger *slog.Logger, registry *prometheus.Registry, enablePprof bool) *Server {
	return &Server{addr: addr, logger: logger, registry: registry, pprof: enablePprof, checks: map[string]Check{}}
}

// AddCheck registers a readiness check under name.
func (s *Server) AddCheck(name string, c Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[name] = c
}

// SetDraining makes /readyz fail so load balancers stop sending work while
// the service drains; /healthz keeps answering.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Addr is the bound address once started.
func (s *Server) Addr() string {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.ln == nil {
		return s.addr
	}
	return s.ln.Addr().String()
}

// Handler is the server's routes, for tests and embedding.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", s.readyz)
	mux.Handle("/metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
	if s.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		http.Error(w, "draining\n", http.StatusServiceUnavailable)
		return
	}
	s.mu.Lock()
	names := make([]string, 0, len(s.checks))
	for n := range s.checks {
		names = append(names, n)
	}
	checks := make(map[string]Check, len(s.checks))
	for n, c := range s.checks {
		checks[n] = c
	}
	s.mu.Unlock()
	sort.Strings(names)
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	failed := false
	var body []byte
	for _, n := range names {
		if err := checks[n](ctx); err != nil {
			failed = true
			body = fmt.Appendf(body, "%s: %v\n", n, err)
		} else {
			body = fmt.Appendf(body, "%s: ok\n", n)
		}
	}
	if failed {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(body)
}

// Start binds the address and serves in the background.
func (s *Server) Start(ctx context.Context) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("admin: listen %s: %w", s.addr, err)
	}
	s.lnMu.Lock()
	s.ln = ln
	s.lnMu.Unlock()
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	s.logger.Info("admin server listening", "addr", ln.Addr().String())
	return s.runner.Run(func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- s.srv.Serve(ln) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
}

// Stop shuts the server down, waiting up to 5 s for open requests.
func (s *Server) Stop() { s.runner.Stop() }

// Done is closed when the server stopped serving; Err says why, when it
// was not Stop (lifecycle.Watched: a service whose admin port died is
// restarted rather than left unprobed).
func (s *Server) Done() <-chan struct{} { return s.runner.Done() }

// Err is why the server stopped serving on its own, if it did.
func (s *Server) Err() error { return s.runner.Err() }

var _ lifecycle.Watched = (*Server)(nil)
