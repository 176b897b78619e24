package prefetch

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// Listener holds one connection LISTENing on a channel and turns each
// notification into a coalesced wake-up. It reconnects on its own.
type Listener struct {
	connConfig *pgx.ConnConfig
	channel    string
	log        *slog.Logger
	clk        clock.Clock
	c          chan struct{}
	runner     lifecycle.Runner
}

// NewListener listens on channel with a dedicated connection made from
// connConfig (not a pooled one: LISTEN is per session).
func NewListener(connConfig *pgx.ConnConfig, channel string, log *slog.Logger, clk clock.Clock) *Listener {
	return &Listener{connConfig: connConfig, channel: channel, log: log.With("channel", channel), clk: clk, c: make(chan struct{}, 1)}
}

// C receives a value after notifications (many coalesce into one).
func (l *Listener) C() <-chan struct{} { return l.c }

func (l *Listener) Start(context.Context) error { return l.runner.Run(l.run) }

func (l *Listener) Stop() { l.runner.Stop() }

func (l *Listener) run(ctx context.Context) error {
	for {
		err := l.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		l.log.Warn("listen connection lost; reconnecting", "err", err)
		t := l.clk.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

func (l *Listener) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.connConfig)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return err
	}
	l.signal() // notifications sent while we were not listening are lost
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		l.signal()
	}
}

func (l *Listener) signal() {
	select {
	case l.c <- struct{}{}:
	default:
	}
}
