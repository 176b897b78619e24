// Package evict takes a dead worker out of the consumer group as soon as
// its liveness key lapses, instead of after the group's session timeout.
//
// Why: a worker killed -9 keeps its partitions until the broker has not
// heard from it for the session timeout (2 s asked, and never less than the
// brokers' group.min.session.timeout.ms, 6 s unless an operator lowered
// it). Its firings due meanwhile wait for that, then for the rebalance.
// The worker's liveness key in Redis (--liveness-ttl, refreshed every
// quarter of it) already says sooner that it is gone: its leases are free
// the moment the key lapses. The Evictor, run by every worker, reads its
// peers' keys every tenth of the TTL (one script call) and removes a static member whose
// key lapsed from the group by its instance id (a LeaveGroup, as an
// administrator's "remove members" does, KIP-345), so the broker
// rebalances at once and the survivors take its partitions.
//
// Only a peer whose key was seen while it was a member is ever removed, so
// a worker running without liveness is left to the session timeout.
// Nothing is removed while this worker's own key is missing (it is the one
// cut off from Redis) or for a TTL after Redis lost its keys (a restart
// without persistence: every key is missing for a moment while every
// worker lives). Nor while this worker's own key has less than half its
// TTL left: it refreshes every quarter, so its own refresher is behind,
// and a worker starved of CPU cannot tell a dead peer from a peer starved
// as it is — two starved workers used to take each other out of the
// group, and each then waited 20 s with an empty assignment. A live
// worker removed by mistake (stalled past its TTL) rejoins with its
// instance id; its leases were already free, and fences keep its late
// calls out.
package evict

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// Member is one static member of the group: its instance id and the
// worker id its client names (the worker's liveness key).
type Member struct {
	InstanceID string
	WorkerID   string
}

// Group is the consumer group as the Evictor sees it.
type Group interface {
	// Members lists the group's static members (dynamic ones are left out).
	Members(ctx context.Context) ([]Member, error)
	// Remove takes the members with these instance ids out of the group; a
	// member already gone is not an error.
	Remove(ctx context.Context, instanceIDs []string) error
}

// Liveness reads workers' liveness keys (lease.Store.LivingFor): how long
// each has left (0: gone), and whether Redis kept its keys since the last
// read.
type Liveness interface {
	LivingFor(ctx context.Context, workers []string) (left []time.Duration, kept bool, err error)
}

// Config is the Evictor's policy.
type Config struct {
	// Self is this worker's id: never removed by itself.
	Self string
	// TTL is the liveness keys' TTL: their lapse is the signal. The keys
	// are read every tenth of it, and nothing is removed for a TTL after
	// Redis lost its keys.
	TTL time.Duration
	// MembersEvery is how often the group's members are listed (a member
	// that joins and dies before the next listing is left to the session
	// timeout). Default 5 s.
	MembersEvery time.Duration
	// Removed, when set, is called with the number of members removed.
	Removed func(n int)
}

// Evictor is a lifecycle.Service.
type Evictor struct {
	cfg    Config
	group  Group
	live   Liveness
	clk    clock.Clock
	logger *slog.Logger
	runner lifecycle.Runner

	members   []Member
	listedAt  time.Time
	seen      map[string]bool // worker ids whose key was seen as members
	quietTill time.Time
	read      bool // LivingFor answered once
	failing   bool
	behind    bool // this worker's own key was behind at the last look
}

// New returns an Evictor; nothing is read until Start.
func New(cfg Config, group Group, live Liveness, clk clock.Clock, logger *slog.Logger) *Evictor {
	if cfg.MembersEvery <= 0 {
		cfg.MembersEvery = 5 * time.Second
	}
	return &Evictor{cfg: cfg, group: group, live: live, clk: clk, logger: logger, seen: map[string]bool{}}
}

// Start runs the loop.
func (e *Evictor) Start(context.Context) error { return e.runner.Run(e.loop) }

// Stop ends the loop.
func (e *Evictor) Stop() { e.runner.Stop() }

// Done is closed when the loop has ended.
func (e *Evictor) Done() <-chan struct{} { return e.runner.Done() }

// Err is the loop's error, if it ended on its own.
func (e *Evictor) Err() error { return e.runner.Err() }

func (e *Evictor) loop(ctx context.Context) error {
	every := max(e.cfg.TTL/10, 10*time.Millisecond)
	for {
		t := e.clk.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		e.Check(ctx)
	}
}

// Check is one round: list the members when due, read their keys, remove
// the dead. The loop calls it every tenth of the TTL; tests call it.
func (e *Evictor) Check(ctx context.Context) {
	now := e.clk.Now()
	if e.members == nil || now.Sub(e.listedAt) >= e.cfg.MembersEvery {
		cctx, cancel := context.WithTimeout(ctx, e.callTimeout())
		ms, err := e.group.Members(cctx)
		cancel()
		if err != nil {
			e.fail("could not list the group's members", err)
			if e.members == nil {
				return
			}
		} else {
			e.members, e.listedAt = ms, now
			e.forgetLeft()
		}
	}
	workers := []string{e.cfg.Self}
	var peers []Member
	for _, m := range e.members {
		if m.WorkerID != e.cfg.Self && m.WorkerID != "" && m.InstanceID != "" {
			peers = append(peers, m)
			workers = append(workers, m.WorkerID)
		}
	}
	if len(peers) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, e.callTimeout())
	left, kept, err := e.live.LivingFor(cctx, workers)
	cancel()
	if err != nil {
		e.fail("could not read the workers' liveness keys", err)
		return
	}
	e.ok()
	if !kept {
		// Redis lost its keys (or the marker is new: the first worker of a
		// fresh deployment): every worker refreshes its own within a
		// quarter TTL; until a TTL has passed a missing key means nothing.
		e.quietTill = now.Add(e.cfg.TTL)
		if e.read {
			e.logger.Info("Redis lost its keys; no worker is taken out of the group for a liveness TTL", "ttl", e.cfg.TTL)
		}
	}
	e.read = true
	if !kept {
		return
	}
	if left[0] <= 0 || now.Before(e.quietTill) {
		return // this worker is the one cut off, or Redis just came back
	}
	var dead []Member
	for i, m := range peers {
		switch {
		case left[i+1] > 0:
			e.seen[m.WorkerID] = true
		case e.seen[m.WorkerID]:
			dead = append(dead, m)
		}
	}
	behind := left[0] < e.cfg.TTL/2
	if behind && len(dead) > 0 && !e.behind {
		e.logger.Info("this worker's own liveness key is behind; no peer is taken out of the group while it is (a starved worker cannot tell a dead peer from a starved one)",
			"left", left[0], "ttl", e.cfg.TTL, "peers_lapsed", len(dead))
	}
	e.behind = behind
	if len(dead) == 0 || behind {
		return
	}
	ids := make([]string, len(dead))
	for i, m := range dead {
		ids[i] = m.InstanceID
	}
	cctx, cancel = context.WithTimeout(ctx, e.callTimeout())
	err = e.group.Remove(cctx, ids)
	cancel()
	if err != nil {
		e.fail("could not take a dead worker out of the group; its partitions move when its session times out", err)
		return
	}
	for _, m := range dead {
		delete(e.seen, m.WorkerID)
		e.logger.Info("took a dead worker out of the group: its liveness key lapsed", "worker", m.WorkerID, "instance_id", m.InstanceID, "ttl", e.cfg.TTL)
	}
	// Not read again: a worker that rejoins with the same instance id is
	// listed anew, and must be seen alive before it can be removed again.
	e.members = slices.DeleteFunc(e.members, func(m Member) bool { return slices.Contains(ids, m.InstanceID) })
	if e.cfg.Removed != nil {
		e.cfg.Removed(len(dead))
	}
}

// callTimeout bounds each call: a TTL, so a slow broker or Redis delays
// the next round by at most that.
func (e *Evictor) callTimeout() time.Duration { return max(e.cfg.TTL, 100*time.Millisecond) }

// forgetLeft drops what was seen of workers no longer members.
func (e *Evictor) forgetLeft() {
	in := make(map[string]bool, len(e.members))
	for _, m := range e.members {
		in[m.WorkerID] = true
	}
	for w := range e.seen {
		if !in[w] {
			delete(e.seen, w)
		}
	}
}

func (e *Evictor) fail(msg string, err error) {
	if !e.failing {
		e.logger.Warn(msg, "err", err)
	}
	e.failing = true
}

func (e *Evictor) ok() {
	if e.failing {
		e.logger.Info("reading the group and the liveness keys again")
	}
	e.failing = false
}
