package peers

import (
	"context"
	"log/slog"
	"time"
)

// peer is a scheduler that runs inside the benchmark process and fires
// jobs 0..n-1 at a sink, each every second at its offset (Offset).
type peer interface {
	// start sets the peer up (its own database, Redis DB, …) and starts
	// firing; firings before the measured window are a warm-up.
	start(ctx context.Context, cfg peerConfig) error
	// stop stops firing and removes what start created.
	stop(ctx context.Context) error
	// resolve fills in the due instant of arrivals the peer's handler
	// could not know (asynq); others return them as they are.
	resolve(arrivals []Arrival) []Arrival
	// setting describes how the peer was configured, for the report.
	setting() string
}

// peerConfig is what every peer is started with.
type peerConfig struct {
	jobs    int
	shape   Shape
	post    *poster
	workers int           // concurrent deliveries (Sundial's --executors)
	poll    time.Duration // the poll intervals a peer has, where it has them
	log     *slog.Logger
}
