package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	pgoutbox "github.com/sundialhq/sundial/pkg/postgres/outbox"
	"github.com/sundialhq/sundial/pkg/process/clock"
)

// Listener holds one dedicated connection (LISTEN needs a session of its
// own: a pooled connection would hand the subscription to whoever borrows it
// next) and calls wake on every notification on the outbox's channel. When the connection
// drops it reconnects with capped backoff, and wakes once after each
// (re)connect because notifications sent while it was away are lost.
type Listener struct {
	Config *pgx.ConnConfig
	Logger *slog.Logger
	Clock  clock.Clock
	// Connected, if set, is told whether the subscription is live (a gauge).
	Connected func(bool)
}

const (
	listenMinBackoff = 100 * time.Millisecond
	listenMaxBackoff = 5 * time.Second
)

// Run listens until ctx ends; it always returns nil then.
func (l *Listener) Run(ctx context.Context, wake func()) error {
	backoff := listenMinBackoff
	for {
		err := l.session(ctx, wake, func() { backoff = listenMinBackoff })
		if ctx.Err() != nil {
			return nil
		}
		l.Logger.Warn("outbox listener disconnected; polling covers the gap", "err", err, "retry_in", backoff)
		t := l.Clock.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		backoff = min(2*backoff, listenMaxBackoff)
	}
}

// session runs one connection's subscription until it fails or ctx ends.
func (l *Listener) session(ctx context.Context, wake func(), healthy func()) error {
	conn, err := pgx.ConnectConfig(ctx, l.Config.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{pgoutbox.Channel}.Sanitize()); err != nil {
		return err
	}
	healthy()
	l.set(true)
	defer l.set(false)
	wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}

func (l *Listener) set(up bool) {
	if l.Connected != nil {
		l.Connected(up)
	}
}
