// Package telemetry builds the logger and the Prometheus registry a service
// passes to its components.
package telemetry

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewLogger returns a structured logger writing to w. format is "json" or
// "text"; level is debug, info, warn or error.
func NewLogger(w io.Writer, format, level, service string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log-level: %q is not one of debug, info, warn, error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch strings.ToLower(format) {
	case "json":
		h = slog.NewJSONHandler(w, opts)
	case "text":
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, fmt.Errorf("log-format: %q is not one of json, text", format)
	}
	return slog.New(h).With("service", service), nil
}

// NewRegistry returns a Prometheus registry with the Go runtime and process
// collectors, so every service exports memory, GC and CPU figures.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}
