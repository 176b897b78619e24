package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
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
