//go:build integration

package rangeleader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/testkit/testinfra"
)

// Tests run against the real ZooKeeper from deploy/local/infra.sh, each in
// its own root (deleted when the test ends).

const (
	testRanges         = 16
	testSessionTimeout = 2 * time.Second
)

// board records which member works which range, and fails the test if two
// ever work one range at once.
type board struct {
	t      *testing.T
	mu     sync.Mutex
	active map[int]string
	epochs map[int][]int64
	causes []error
	// began and ended are when each term (by epoch) began and ended.
	began, ended map[int64]time.Time
}

func newBoard(t *testing.T) *board {
	return &board{t: t, active: map[int]string{}, epochs: map[int][]int64{},
		began: map[int64]time.Time{}, ended: map[int64]time.Time{}}
}

func (b *board) work(name string) func(ctx context.Context, term Term) {
	return func(ctx context.Context, term Term) {
		b.mu.Lock()
		if o, ok := b.active[term.Range]; ok {
			b.t.Errorf("range %d worked by %s and %s at once", term.Range, o, name)
		}
		b.active[term.Range] = name
		b.epochs[term.Range] = append(b.epochs[term.Range], term.Epoch)
		b.began[term.Epoch] = time.Now()
		b.mu.Unlock()
		<-ctx.Done()
		b.mu.Lock()
		delete(b.active, term.Range)
		b.causes = append(b.causes, context.Cause(ctx))
		b.ended[term.Epoch] = time.Now()
		b.mu.Unlock()
	}
}

func (b *board) snapshot() map[int]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[int]string, len(b.active))
	for r, m := range b.active {
		out[r] = m
	}
	return out
}

func (b *board) lastEpoch(r int) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.epochs[r]
	return e[len(e)-1]
}

// cutDialer dials real connections and can cut them all and refuse new
// ones: to the server the member falls silent, exactly as after kill -9
// (its session expires on the server's clock).
type cutDialer struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (d *cutDialer) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, errors.New("cut")
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *cutDialer) Cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = true
	for _, c := range d.conns {
		_ = c.Close()
	}
}

func (d *cutDialer) Heal() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = false
}

func start(t *testing.T, path, name string, b *board, d *cutDialer) *Coordinator {
	t.Helper()
	return startWith(t, path, name, b, func(cfg *Config) {
		if d != nil {
			cfg.Dialer = d.Dial
		}
	})
}

// startWith starts a member of testRanges ranges with cfg adjusted.
func startWith(t *testing.T, path, name string, b *board, adjust func(*Config)) *Coordinator {
	t.Helper()
	cfg := Config{
		Servers: testinfra.ZooKeeperAddrs(t), Path: path, NodeID: name, Ranges: testRanges,
		SessionTimeout: testSessionTimeout,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Work:           b.work(name),
	}
	adjust(&cfg)
	c, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(c.Stop)
	return c
}

func groupPath(t *testing.T) string {
	_, root := testinfra.ZooKeeper(t)
	return root + "/ranges"
}

// requireSpread waits until every range is worked and the loads of the
// named members differ by at most one.
func requireSpread(t *testing.T, b *board, names ...string) map[int]string {
	t.Helper()
	var snap map[int]string
	require.Eventually(t, func() bool {
		snap = b.snapshot()
		if len(snap) != testRanges {
			return false
		}
		c := map[string]int{}
		for _, m := range snap {
			c[m]++
		}
		lo, hi := testRanges, 0
		for _, n := range names {
			lo, hi = min(lo, c[n]), max(hi, c[n])
		}
		return hi-lo <= 1 && len(c) == len(names)
	}, 15*time.Second, 20*time.Millisecond, "ranges never spread over %v: %v", names, snap)
	return snap
}

func TestRangesSpreadAndMoveOnlyWhatTheyMust(t *testing.T) {
	path, b := groupPath(t), newBoard(t)
	a := start(t, path, "a", b, nil)
	requireSpread(t, b, "a")
	start(t, path, "b", b, nil)
	s2 := requireSpread(t, b, "a", "b")
	c := start(t, path, "c", b, nil)
	s3 := requireSpread(t, b, "a", "b", "c")
	for r, m := range s3 {
		if m != "c" {
			require.Equal(t, s2[r], m, "range %d moved between a and b when c joined", r)
		}
	}

	// c leaves: only its ranges move, each to a newer epoch.
	before := map[int]int64{}
	for r, m := range s3 {
		if m == "c" {
			before[r] = b.lastEpoch(r)
		}
	}
	c.Stop()
	s4 := requireSpread(t, b, "a", "b")
	for r, m := range s3 {
		if m != "c" {
			require.Equal(t, m, s4[r], "range %d of a staying member moved when c left", r)
		} else {
			require.Greater(t, b.lastEpoch(r), before[r], "range %d: the new leader's epoch must be larger", r)
		}
	}
	require.ElementsMatch(t, led(s4, "a"), a.Led())
}

func led(snap map[int]string, name string) []int {
	var out []int
	for r, m := range snap {
		if m == name {
			out = append(out, r)
		}
	}
	return out
}

// A member that falls silent (kill -9, or cut off) stops working its
// ranges at once, and the others lead them within about a session timeout.
func TestSilentMembersRangesMoveWithinTheSessionTimeout(t *testing.T) {
	path, b := groupPath(t), newBoard(t)
	d := &cutDialer{}
	start(t, path, "a", b, nil)
	start(t, path, "b", b, d)
	s := requireSpread(t, b, "a", "b")
	mine := led(s, "b")
	require.NotEmpty(t, mine)

	cut := time.Now()
	d.Cut()
	require.Eventually(t, func() bool {
		snap := b.snapshot()
		for _, r := range mine {
			if snap[r] == "b" {
				return false
			}
		}
		return true
	}, time.Second, time.Millisecond, "the cut member kept working")
	requireSpread(t, b, "a")
	took := time.Since(cut)
	t.Logf("ranges of the silent member led again %s after the cut (session timeout %s)", took, testSessionTimeout)
	// The server expires the session within its timeout plus a tick; the
	// survivor reacts to the lock deletions at once.
	require.Less(t, took, testSessionTimeout+2*time.Second)
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Contains(t, fmt.Sprint(b.causes), ErrConnectionLost.Error())
}

// A connection blip shorter than the session timeout ends the member's
// work at once (nobody can confirm the session), and once reconnected the
// member resumes the same ranges on the same epochs: its locks survived
// with the session, and nobody else could take them.
func TestConnectionBlipResumesTheSameRangesOnTheSameEpochs(t *testing.T) {
	path, b := groupPath(t), newBoard(t)
	d := &cutDialer{}
	start(t, path, "a", b, nil)
	start(t, path, "b", b, d)
	s := requireSpread(t, b, "a", "b")
	mine := led(s, "b")
	epochs := map[int]int64{}
	// The spread is settled once no range changed hands or epoch for a
	// while: the cut must find b at rest on the terms it then resumes.
	require.Eventually(t, func() bool {
		before := map[int]int64{}
		for r := range testRanges {
			before[r] = b.lastEpoch(r)
		}
		time.Sleep(200 * time.Millisecond)
		now := b.snapshot()
		mine = led(now, "b")
		if len(now) != testRanges {
			return false
		}
		for r := range testRanges {
			if b.lastEpoch(r) != before[r] {
				return false
			}
		}
		for _, r := range mine {
			epochs[r] = before[r]
		}
		return true
	}, 10*time.Second, time.Millisecond, "the ranges never settled")

	d.Cut()
	require.Eventually(t, func() bool {
		snap := b.snapshot()
		for _, r := range mine {
			if _, ok := snap[r]; ok {
				return false
			}
		}
		return true
	}, time.Second, time.Millisecond, "work went on without a connection")
	d.Heal()
	s2 := requireSpread(t, b, "a", "b")
	require.ElementsMatch(t, mine, led(s2, "b"))
	for _, r := range mine {
		require.Equal(t, epochs[r], b.lastEpoch(r), "range %d resumed on another epoch", r)
	}
}

// A member configured with another number of ranges stays out while the
// group's members lead (lock r0003 would mean other partitions to it), and
// takes the group over with its own number once they are gone (a
// deployment restarted with a new --ranges).
func TestMemberWithAnotherRangeCountStaysOut(t *testing.T) {
	path, b := groupPath(t), newBoard(t)
	a := start(t, path, "a", b, nil)
	requireSpread(t, b, "a")
	cfg := Config{
		Servers: testinfra.ZooKeeperAddrs(t), Path: path, NodeID: "odd", Ranges: 8,
		SessionTimeout: testSessionTimeout,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Work:           b.work("odd"),
	}
	odd, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, odd.Start(context.Background()))
	t.Cleanup(odd.Stop)
	require.Eventually(t, func() bool { return errors.Is(odd.Check(context.Background()), ErrRangesMismatch) }, 10*time.Second, 10*time.Millisecond,
		"a member that cannot join must not say it is ready")
	require.Never(t, func() bool { return len(odd.Led()) > 0 }, 2*time.Second, 50*time.Millisecond)
	require.Len(t, led(b.snapshot(), "a"), testRanges)

	a.Stop()
	require.Eventually(t, func() bool { return len(odd.Led()) == 8 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, odd.Check(context.Background()))
}

// The trust window is computed from the timeout the server negotiated when
// it is smaller than the one asked for (ZooKeeper clamps it to its
// maxSessionTimeout): trusting the requested one would let a cut-off member
// work on after the server expired it.
func TestTheNegotiatedSessionTimeoutIsTrusted(t *testing.T) {
	path, b := groupPath(t), newBoard(t)
	cfg := Config{
		Servers: testinfra.ZooKeeperAddrs(t), Path: path, NodeID: "a", Ranges: testRanges,
		SessionTimeout: 10 * time.Minute, // far above any default maxSessionTimeout
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Work:           b.work("a"),
	}
	c, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(c.Stop)
	require.Eventually(t, func() bool { return c.SessionTimeout() < 10*time.Minute }, 10*time.Second, 10*time.Millisecond,
		"the negotiated timeout was never learnt (did the client's log format change?)")
	t.Logf("requested 10m, trusting %s", c.SessionTimeout())
}

// A member whose node is deleted while its session lives (an operator, a
// stray client: the ACLs may be open) joins again under a new name. Its
// range locks are still its session's, under the old name: it must take
// them up again, not leave them held by nobody's work until the session
// ends.
func TestMemberNodeLostKeepsItsSessionsLocks(t *testing.T) {
	path, b := groupPath(t), newBoard(t)
	a := start(t, path, "a", b, nil)
	requireSpread(t, b, "a")
	conn := testinfra.ZooKeeperConnect(t, 5*time.Second)
	members, _, err := conn.Children(path + "/members")
	require.NoError(t, err)
	require.Len(t, members, 1)
	require.NoError(t, conn.Delete(path+"/members/"+members[0], -1))
	require.Eventually(t, func() bool {
		now, _, err := conn.Children(path + "/members")
		return err == nil && len(now) == 1 && now[0] != members[0]
	}, 15*time.Second, 20*time.Millisecond, "a never joined again")
	require.Eventually(t, func() bool { return len(a.Led()) == testRanges }, 15*time.Second, 20*time.Millisecond,
		"a leads %v after joining again, want every range", a.Led())
	requireSpread(t, b, "a")
}
