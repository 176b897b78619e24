// Command prefetcher is Sundial's prefetcher service: the ZooKeeper-elected
// leader stages every slot due within the window as outbox rows, fenced by
// its election epoch. See docs/architecture/prefetcher.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/config"
	"github.com/sundialhq/sundial/pkg/daemon"
	"github.com/sundialhq/sundial/pkg/leader"
	"github.com/sundialhq/sundial/pkg/lifecycle"
	"github.com/sundialhq/sundial/services/prefetcher/internal/prefetch"
	"github.com/sundialhq/sundial/services/prefetcher/internal/stage"
)

type settings struct {
	PostgresDSN      string
	ZKAddrs          string
	ZKSessionTimeout time.Duration
	prefetch.Config
}

func (s *settings) register(fs *flag.FlagSet) {
	fs.StringVar(&s.PostgresDSN, "postgres-dsn", "postgres://sundial:sundial@127.0.0.1:5432/sundial?sslmode=disable", "Postgres connection string (search_path selects the schema)")
	fs.StringVar(&s.ZKAddrs, "zk-addrs", "127.0.0.1:2181", "comma-separated ZooKeeper host:port list")
	fs.DurationVar(&s.ZKSessionTimeout, "zk-session-timeout", 3*time.Second, "ZooKeeper session timeout; a standby takes over about this long after a leader dies without closing its session")
	fs.StringVar(&s.Election, "election-path", "/sundial/elections/prefetcher", "ZooKeeper path of the election (also its leader_epochs key)")
	fs.StringVar(&s.NodeID, "node-id", defaultNodeID(), "this candidate's name in ZooKeeper, leader_epochs and logs")
	fs.DurationVar(&s.Window, "window", 2*time.Minute, "stage slots due up to this far ahead of the database clock")
	fs.DurationVar(&s.Tick, "tick", time.Second, "interval between prefetch passes (new terms and job notifications wake it sooner)")
	fs.IntVar(&s.BatchSize, "batch-size", 500, "jobs claimed per transaction")
	fs.DurationVar(&s.MisfireThreshold, "misfire-threshold", 5*time.Second, "a slot counts as missed (misfire policy applies) only when older than this")
	fs.IntVar(&s.MaxSlotsPerJob, "max-slots-per-job", 10000, "most slots of one job staged per transaction (the rest follow next pass)")
}

func (s *settings) validate(p *config.Problems) {
	if s.PostgresDSN == "" {
		p.Addf("postgres-dsn", "must not be empty")
	} else if _, err := pgxpool.ParseConfig(s.PostgresDSN); err != nil {
		p.Addf("postgres-dsn", "%v", err)
	}
	if len(s.zkServers()) == 0 {
		p.Addf("zk-addrs", "must list at least one host:port")
	}
	if s.ZKSessionTimeout < 500*time.Millisecond {
		p.Addf("zk-session-timeout", "must be at least 500ms, got %s", s.ZKSessionTimeout)
	}
	if err := s.Config.Validate(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			name, msg, _ := strings.Cut(line, ": ")
			p.Addf(name, "%s", msg)
		}
	}
}

func (s *settings) zkServers() []string {
	var out []string
	for _, a := range strings.Split(s.ZKAddrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func defaultNodeID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "prefetcher"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

func main() {
	var s settings
	daemon.Main("prefetcher",
		func(fs *flag.FlagSet, c *daemon.Common) {
			c.Register(fs, "127.0.0.1:8082")
			s.register(fs)
		},
		s.validate,
		func(ctx context.Context, env daemon.Env) ([]lifecycle.Service, error) { return build(ctx, env, s) },
	)
}

// build composes the service. The group starts them in order and stops
// them in reverse: the prefetch loop stops first (ending the term's work
// and rolling back an in-flight transaction), then the listener, then the
// elector (closing the session hands leadership over at once), then the
// pool.
func build(ctx context.Context, env daemon.Env, s settings) ([]lifecycle.Service, error) {
	clk := clock.Real{}
	pool, err := pgxpool.New(ctx, s.PostgresDSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	metrics := prefetch.NewMetrics(env.Registry)
	elector, err := leader.New(leader.Config{
		Servers:        s.zkServers(),
		Path:           s.Election,
		NodeID:         s.NodeID,
		SessionTimeout: s.ZKSessionTimeout,
		Logger:         env.Logger,
		Clock:          clk,
		OnTransition:   metrics.ObserveElection,
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	store := stage.New(pool, env.Logger)
	listener := prefetch.NewListener(pool.Config().ConnConfig.Copy(), prefetch.JobsChannel, env.Logger, clk)
	loop, err := prefetch.New(s.Config, elector, store, listener.C(), env.Logger, clk, metrics)
	if err != nil {
		pool.Close()
		return nil, err
	}
	env.Admin.AddCheck("postgres", store.Ping)
	env.Admin.AddCheck("zookeeper", elector.Check)
	env.Logger.Info("prefetcher configured", "node_id", s.NodeID, "election", s.Election,
		"window", s.Window, "tick", s.Tick, "batch_size", s.BatchSize, "zk_session_timeout", s.ZKSessionTimeout)
	return []lifecycle.Service{poolCloser{pool}, elector, listener, loop}, nil
}

// poolCloser closes the pool when the group stops, after everything that
// uses it.
type poolCloser struct{ pool *pgxpool.Pool }

func (poolCloser) Start(context.Context) error { return nil }
func (p poolCloser) Stop()                     { p.pool.Close() }
