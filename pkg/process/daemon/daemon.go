// Package daemon is the shared shape of a Sundial service's main: settings
// every service has (admin address, logging, drain timeout), the logger
// (NewLogger) and metrics registry, the admin server, and the run-until-signal-then-drain
// sequence. A service's main registers its own flags next to these, builds
// its components and hands them to Run.
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/pkg/process/admin"
	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/process/tracing"
)

// Common holds the settings every service has.
type Common struct {
	AdminAddr    string
	LogLevel     string
	LogFormat    string
	Pprof        bool
	DrainTimeout time.Duration
	// SysmonTick starts the process with SysmonSetting (see there).
	SysmonTick bool
	// Tracing is off unless --otel-exporter names an exporter.
	Tracing tracing.Config
}

// Register adds the common flags to fs with their defaults.
func (c *Common) Register(fs *flag.FlagSet, defaultAdminAddr string) {
	fs.StringVar(&c.AdminAddr, "admin-addr", defaultAdminAddr, "address of the admin HTTP server (/healthz, /readyz, /metrics)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "json", "log format: json or text")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve /debug/pprof on the admin server")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 30*time.Second, "longest graceful drain on SIGTERM before a hard stop")
	fs.BoolVar(&c.SysmonTick, "sysmon-tick", true, "keep the Go runtime's system monitor on its own tick instead of waking it at every timer (the process re-executes itself once with GODEBUG="+SysmonSetting+"; saves a fifth of the worker's CPU at a firing every millisecond, docs/benchmarks.md)")
	c.Tracing.Register(fs)
}

// Validate records problems with the common settings.
func (c *Common) Validate(p *config.Problems) {
	if c.AdminAddr == "" {
		p.Addf("admin-addr", "must not be empty")
	}
	if c.DrainTimeout <= 0 {
		p.Addf("drain-timeout", "must be positive, got %s", c.DrainTimeout)
	}
	c.Tracing.Validate(p)
}

// Env is what Run gives the service's build function.
type Env struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Admin    *admin.Server
	// Tracing hands out the service's tracers; its Tracer is nil when
	// tracing is off.
	Tracing *tracing.Provider
}

// Run builds the logger, registry and admin server, asks build for the
// service's components (started in order after the admin server, stopped in
// reverse), then waits for SIGTERM/SIGINT or ctx to end and drains: /readyz
// fails first so traffic moves away, then components stop, bounded by the
// drain timeout.
func Run(ctx context.Context, name string, c Common, stderr io.Writer, build func(ctx context.Context, env Env) ([]lifecycle.Service, error)) error {
	logger, err := NewLogger(stderr, c.LogFormat, c.LogLevel, name)
	if err != nil {
		return err
	}
	reg := admin.NewRegistry()
	adm := admin.New(c.AdminAddr, logger, reg, c.Pprof)
	tp, err := tracing.New(ctx, name, c.Tracing)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	env := Env{Logger: logger, Registry: reg, Admin: adm, Tracing: tp}
	if tp.Enabled() {
		logger.Info("tracing on", "exporter", c.Tracing.Exporter, "endpoint", c.Tracing.Endpoint,
			"sample_ratio", c.Tracing.SampleRatio, "firing_sample_ratio", c.Tracing.FiringSampleRatio)
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var group lifecycle.Group
	// First in, last out: spans of the drain itself are flushed too.
	group.Add(tp)
	group.Add(adm)
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	comps, err := build(startCtx, env)
	if err != nil {
		tp.Stop()
		return fmt.Errorf("%s: build: %w", name, err)
	}
	group.Add(comps...)
	if err := group.Start(startCtx); err != nil {
		return fmt.Errorf("%s: start: %w", name, err)
	}
	logger.Info("service started", "godebug", os.Getenv("GODEBUG"))
	// A component that ends on its own (a serve loop that failed) stops the
	// process, non-zero, after draining the rest: a service with a dead
	// part that still answers /healthz would never be restarted.
	var ended error
	select {
	case <-ctx.Done():
		logger.Info("draining")
	case ended = <-group.Ended():
		logger.Error("a component stopped on its own; draining the rest and exiting", "err", ended)
	}
	adm.SetDraining()
	done := make(chan struct{})
	go func() { group.Stop(); close(done) }()
	select {
	case <-done:
		logger.Info("stopped")
		if ended != nil {
			return fmt.Errorf("%s: %w", name, ended)
		}
		return nil
	case <-time.After(c.DrainTimeout):
		logger.Error("drain timed out, exiting", "timeout", c.DrainTimeout)
		return errors.Join(ended, fmt.Errorf("%s: drain exceeded %s", name, c.DrainTimeout))
	}
}

// Main is the whole main function of a service: load flags and environment,
// validate, run, and exit non-zero on any error.
func Main(name string, register func(fs *flag.FlagSet, c *Common), validate func(p *config.Problems), build func(ctx context.Context, env Env) ([]lifecycle.Service, error)) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var c Common
	register(fs, &c)
	if err := config.Load(fs, os.Args[1:], os.LookupEnv); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c.Tracing.ApplyOTelEnv(set, os.LookupEnv)
	var p config.Problems
	c.Validate(&p)
	validate(&p)
	if err := p.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: invalid configuration:\n%v\n", name, err)
		os.Exit(2)
	}
	if c.SysmonTick {
		if _, err := keepSysmonTicking(os.Args, os.Environ(), execSelf); err != nil {
			fmt.Fprintf(os.Stderr, "%s: --sysmon-tick: could not re-execute with GODEBUG=%s, running without it: %v\n", name, SysmonSetting, err)
		}
	}
	if err := Run(context.Background(), name, c, os.Stderr, build); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
