// Package versions keeps the job versions the api announces after each
// change (lease.Store.PublishVersion), so the fire stage can skip a firing
// leased ahead of its instant under a version that changed since.
//
// The lease script checks the version when the lease is taken, which the
// prepare stage does up to --prepare-lead before the instant; a pause,
// update or delete committed in between would otherwise not reach that
// firing. Every change is announced on one pub/sub channel, and this
// watcher remembers each announcement for Keep (well past the lead), so
// the check at the instant is a map lookup, not a round trip.
//
// An announcement missed while the subscription was down (Redis
// restarting) is not replayed: the firings leased before it and due within
// the lead fire under the old version, as they would have if the change had
// come a moment later. Firings leased after it are caught by the lease
// script.
package versions

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/lease"
)

// Keep is how long an announcement is remembered: longer than any firing
// waits between its lease and its request.
const Keep = 10 * time.Minute

// Watch is a lifecycle.Service subscribed to the versions channel.
type Watch struct {
	rdb     redis.UniversalClient
	channel string
	clk     clock.Clock
	logger  *slog.Logger

	mu     sync.Mutex
	latest map[string]entry
	pruned time.Time

	changed func(jobID string, version int64)

	runner lifecycle.Runner
}

// Option configures a Watch.
type Option func(*Watch)

// WithChanged calls f, synchronously and outside the watch's lock, each
// time a job's remembered version rises (an announcement of a job paused,
// updated or deleted), so the worker can drop that job's held firings of
// older versions at once instead of at their instants (package discard).
// f must not block: it runs on the subscription's goroutine.
func WithChanged(f func(jobID string, version int64)) Option {
	return func(w *Watch) { w.changed = f }
}

type entry struct {
	version int64
	at      time.Time
}

// New returns a watcher of channel (lease.Store.VersionsChannel) on rdb.
func New(rdb redis.UniversalClient, channel string, clk clock.Clock, logger *slog.Logger, opts ...Option) *Watch {
	w := &Watch{rdb: rdb, channel: channel, clk: clk, logger: logger, latest: map[string]entry{}}
	for _, o := range opts {
		o(w)
	}
	return w
}

// Start subscribes; the subscription reconnects by itself after an outage.
func (w *Watch) Start(ctx context.Context) error {
	return w.runner.Run(func(ctx context.Context) error {
		sub := w.rdb.Subscribe(ctx, w.channel)
		defer func() { _ = sub.Close() }()
		msgs := sub.Channel()
		for {
			select {
			case <-ctx.Done():
				return nil
			case m, ok := <-msgs:
				if !ok {
					return nil
				}
				id, v, ok := lease.Version(m.Payload)
				if !ok {
					w.logger.Warn("unreadable version announcement", "payload", m.Payload)
					continue
				}
				w.Note(id, v)
			}
		}
	})
}

// Stop unsubscribes.
func (w *Watch) Stop() { w.runner.Stop() }

// Note remembers that jobID is at version (or later).
func (w *Watch) Note(jobID string, version int64) {
	now := w.clk.Now()
	w.mu.Lock()
	raised := false
	if e, ok := w.latest[jobID]; !ok || e.version < version {
		w.latest[jobID] = entry{version: version, at: now}
		raised = true
	}
	if now.Sub(w.pruned) > Keep/10 {
		for id, e := range w.latest {
			if now.Sub(e.at) > Keep {
				delete(w.latest, id)
			}
		}
		w.pruned = now
	}
	w.mu.Unlock()
	if raised && w.changed != nil {
		w.changed(jobID, version)
	}
}

// Newer reports the version jobID was announced at, if that is above
// version: a firing of version is stale.
func (w *Watch) Newer(jobID string, version int64) (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.latest[jobID]
	if !ok || e.version <= version {
		return 0, false
	}
	return e.version, true
}
