package evict

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
)

// group is a consumer group in memory.
type group struct {
	members []Member
	removed []string
	listErr error
}

func (g *group) Members(context.Context) ([]Member, error) {
	if g.listErr != nil {
		return nil, g.listErr
	}
	return slices.Clone(g.members), nil
}

func (g *group) Remove(_ context.Context, ids []string) error {
	g.removed = append(g.removed, ids...)
	g.members = slices.DeleteFunc(g.members, func(m Member) bool { return slices.Contains(ids, m.InstanceID) })
	return nil
}

// keys is Redis's liveness keys in memory: present workers (with a
// second of TTL left unless left says otherwise), and whether the marker
// survived since the last read.
type keys struct {
	alive map[string]bool
	left  map[string]time.Duration
	lost  bool
	err   error
}

func (k *keys) LivingFor(_ context.Context, workers []string) ([]time.Duration, bool, error) {
	if k.err != nil {
		return nil, false, k.err
	}
	out := make([]time.Duration, len(workers))
	for i, w := range workers {
		switch d, ok := k.left[w]; {
		case !k.alive[w]:
		case ok:
			out[i] = d
		default:
			out[i] = time.Second
		}
	}
	kept := !k.lost
	k.lost = false
	return out, kept, nil
}

func setup() (*group, *keys, *clock.Fake, *Evictor) {
	g := &group{members: []Member{{"i-self", "self"}, {"i-a", "a"}, {"i-b", "b"}}}
	k := &keys{alive: map[string]bool{"self": true, "a": true, "b": true}}
	clk := clock.NewFake(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e := New(Config{Self: "self", TTL: time.Second}, g, k, clk, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return g, k, clk, e
}

// A peer seen alive whose key then lapses is taken out of the group by
// its instance id, once; the live peer and this worker are not.
func TestADeadPeerIsRemoved(t *testing.T) {
	g, k, clk, e := setup()
	ctx := context.Background()
	e.Check(ctx)
	if len(g.removed) != 0 {
		t.Fatalf("all alive: removed %v", g.removed)
	}
	k.alive["a"] = false
	clk.Advance(250 * time.Millisecond)
	e.Check(ctx)
	if !slices.Equal(g.removed, []string{"i-a"}) {
		t.Fatalf("removed %v, want [i-a]", g.removed)
	}
	clk.Advance(250 * time.Millisecond)
	e.Check(ctx)
	if len(g.removed) != 1 {
		t.Fatalf("removed again: %v", g.removed)
	}
}

// A member whose key was never seen (a worker without liveness) is left to
// the session timeout.
func TestAPeerNeverSeenAliveIsLeft(t *testing.T) {
	g, k, _, e := setup()
	k.alive["b"] = false
	e.Check(context.Background())
	e.Check(context.Background())
	if len(g.removed) != 0 {
		t.Fatalf("removed %v, want none", g.removed)
	}
}

// When Redis lost its keys (the marker gone), nobody is removed for a TTL,
// though every key is missing.
func TestNothingIsRemovedForATTLAfterRedisForgot(t *testing.T) {
	g, k, clk, e := setup()
	ctx := context.Background()
	e.Check(ctx)
	k.lost = true
	k.alive = map[string]bool{}
	e.Check(ctx)
	k.alive["self"] = true // this worker refreshed first
	clk.Advance(500 * time.Millisecond)
	e.Check(ctx)
	if len(g.removed) != 0 {
		t.Fatalf("within the TTL after a loss: removed %v", g.removed)
	}
	k.alive["b"] = true // b refreshed; a is really dead
	clk.Advance(600 * time.Millisecond)
	e.Check(ctx)
	if !slices.Equal(g.removed, []string{"i-a"}) {
		t.Fatalf("after the TTL: removed %v, want [i-a]", g.removed)
	}
}

// A worker whose own key is missing is the one cut off: it removes nobody.
func TestAWorkerWithoutItsOwnKeyRemovesNobody(t *testing.T) {
	g, k, _, e := setup()
	ctx := context.Background()
	e.Check(ctx)
	k.alive = map[string]bool{"b": true}
	e.Check(ctx)
	if len(g.removed) != 0 {
		t.Fatalf("removed %v, want none", g.removed)
	}
}

// Errors reading the group or Redis remove nobody; the members listed
// before still count once the group answers no more.
func TestReadErrorsRemoveNobodyAndAnOldListServes(t *testing.T) {
	g, k, clk, e := setup()
	ctx := context.Background()
	k.err = errors.New("redis down")
	e.Check(ctx)
	k.err = nil
	e.Check(ctx)
	g.listErr = errors.New("coordinator moving")
	k.alive["b"] = false
	clk.Advance(6 * time.Second) // the list is due again and fails
	e.Check(ctx)
	if !slices.Equal(g.removed, []string{"i-b"}) {
		t.Fatalf("with the list failing: removed %v, want [i-b] from the list read before", g.removed)
	}
}

// A removed worker that rejoins under its instance id must be seen alive
// again before it can be removed again.
func TestARejoinedWorkerMustBeSeenAgain(t *testing.T) {
	g, k, clk, e := setup()
	ctx := context.Background()
	e.Check(ctx)
	k.alive["a"] = false
	e.Check(ctx)
	g.members = append(g.members, Member{"i-a", "a2"}) // restarted: a new worker id
	clk.Advance(6 * time.Second)
	e.Check(ctx)
	if len(g.removed) != 1 {
		t.Fatalf("a2 never seen alive: removed %v", g.removed)
	}
	k.alive["a2"] = true
	clk.Advance(250 * time.Millisecond)
	e.Check(ctx)
	k.alive["a2"] = false
	clk.Advance(250 * time.Millisecond)
	e.Check(ctx)
	if !slices.Equal(g.removed, []string{"i-a", "i-a"}) {
		t.Fatalf("removed %v, want i-a twice", g.removed)
	}
}

// A worker whose own key is behind (less than half its TTL left: its
// refresher, every quarter TTL, is late, so the process is starved) takes
// no peer out, however lapsed; once its own key is fresh again, a peer
// still lapsed is removed.
func TestAStarvedWorkerRemovesNobody(t *testing.T) {
	g, k, clk, e := setup()
	ctx := context.Background()
	e.Check(ctx)
	k.alive["a"] = false
	k.left = map[string]time.Duration{"self": 300 * time.Millisecond}
	clk.Advance(250 * time.Millisecond)
	e.Check(ctx)
	if len(g.removed) != 0 {
		t.Fatalf("own key 300ms of 1s left: removed %v, want none", g.removed)
	}
	k.left["self"] = 900 * time.Millisecond
	clk.Advance(250 * time.Millisecond)
	e.Check(ctx)
	if !slices.Equal(g.removed, []string{"i-a"}) {
		t.Fatalf("own key fresh again: removed %v, want [i-a]", g.removed)
	}
}
