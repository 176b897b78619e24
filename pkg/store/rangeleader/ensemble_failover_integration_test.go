//go:build integration

package rangeleader

import (
	"context"
	"errors"
	"io"
	"net"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// The ZooKeeper ensemble of the cluster profile (deploy/local/cluster/zookeeper.sh,
// `CLUSTER=1 make infra-up`) loses its leader while two members lead ranges.

// ensembleSessionTimeout is the coordinator's default (Config.SessionTimeout),
// so the recovery measured is the one a prefetcher with default flags sees.
const ensembleSessionTimeout = 4 * time.Second

// ensembleRecoveryBound is how long after the leader's death every range
// must be led again. The surviving members elect a new leader within a few
// ticks (tickTime 250 ms) of seeing its sockets close, and the coordinators'
// sessions survive the election (it is far shorter than their timeout), so
// each member resumes its own ranges on its own locks, same epochs, as soon
// as its client reconnects to a surviving server. Were a session to expire
// instead, its locks would go with it and be taken anew within about a
// session timeout; the bound allows that slower path, plus 2 s.
const ensembleRecoveryBound = ensembleSessionTimeout + 2*time.Second

// fourLetterWord sends ZooKeeper's four-letter word to addr and returns the answer.
func fourLetterWord(addr, word string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	// short: a member between election and service accepts the connection
	// and may not answer at all, and the poll should move on to the next
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := io.WriteString(c, word); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// ensembleLeader is the address of the member whose srvr says "Mode: leader".
func ensembleLeader(addrs []string) (string, bool) {
	for _, a := range addrs {
		if out, err := fourLetterWord(a, "srvr"); err == nil && strings.Contains(out, "Mode: leader") {
			return a, true
		}
	}
	return "", false
}

// ensembleRoot makes a fresh root znode on the ensemble and deletes its
// subtree when the test ends.
func ensembleRoot(t *testing.T, addrs []string) string {
	t.Helper()
	conn, events, err := zk.Connect(addrs, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(discardZK{}))
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { // ends when conn.Close closes the channel
		defer close(done)
		for range events { // drained so the client never blocks
		}
	}()
	t.Cleanup(func() { // runs last: the subtree's deletion below needs the session
		if err := conn.AddAuth("digest", []byte(testinfra.ZooKeeperDigestUser+":"+testinfra.ZooKeeperDigestPassword)); err != nil {
			t.Logf("zookeeper add test identity: %v", err)
		}
		conn.Close()
		<-done
	})
	root := path.Join(testinfra.ZooKeeperRoot, testinfra.UniqueName(t, 100))
	for _, p := range []string{testinfra.ZooKeeperRoot, root} {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("zookeeper create %s: %v", p, err)
		}
	}
	// Registered after the close, so it runs before it.
	t.Cleanup(func() {
		if err := harness.DeleteZNodeTree(conn, root); err != nil {
			t.Logf("zookeeper subtree %s left behind: %v", root, err)
		}
	})
	return root
}

type discardZK struct{}

func (discardZK) Printf(string, ...any) {}

// termLog records when each member began and ended work on each range.
type termLog struct {
	mu     sync.Mutex
	events []termEvent
}

type termEvent struct {
	at    time.Time
	rng   int
	began bool
}

func (l *termLog) wrap(work func(context.Context, Term)) func(context.Context, Term) {
	return func(ctx context.Context, term Term) {
		l.add(term.Range, true)
		defer l.add(term.Range, false)
		work(ctx, term)
	}
}

func (l *termLog) add(r int, began bool) {
	l.mu.Lock()
	l.events = append(l.events, termEvent{time.Now(), r, began})
	l.mu.Unlock()
}

// gaps returns, for the events after since, how long each range went
// unled in all, the longest single gap of any range, and when the last
// gap closed (zero when no range stopped).
func (l *termLog) gaps(since time.Time) (total map[int]time.Duration, longest time.Duration, lastBack time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	total = map[int]time.Duration{}
	stopped := map[int]time.Time{}
	for _, e := range l.events {
		if e.at.Before(since) {
			continue
		}
		if !e.began {
			stopped[e.rng] = e.at
			continue
		}
		if at, ok := stopped[e.rng]; ok {
			g := e.at.Sub(at)
			total[e.rng] += g
			longest = max(longest, g)
			lastBack = e.at
			delete(stopped, e.rng)
		}
	}
	for r, at := range stopped { // still unled
		g := time.Since(at)
		total[r] += g
		longest = max(longest, g)
		lastBack = time.Time{}
	}
	return total, longest, lastBack
}

// ensembleMember is the address of a member whose srvr says "Mode: "+mode
// (leader or follower).
func ensembleMember(addrs []string, mode string) (string, bool) {
	for _, a := range addrs {
		if out, err := fourLetterWord(a, "srvr"); err == nil && strings.Contains(out, "Mode: "+mode) {
			return a, true
		}
	}
	return "", false
}

func TestEnsembleLeaderKilledEveryRangeKeepsOneLeaderAndEpochsRise(t *testing.T) {
	ensembleMemberKilled(t, "leader")
}

// A follower lost: a member whose session it served (the client picks a
// server at random, so in some runs none) reconnects to another within
// its session, no election happens (the leader stays),
// and every range stays led by one member on an epoch that never goes
// down, within the same bound as the leader's loss.
func TestEnsembleFollowerKilledEveryRangeKeepsOneLeaderAndEpochsRise(t *testing.T) {
	ensembleMemberKilled(t, "follower")
}

// ensembleMemberKilled has two members lead the ranges on the ensemble,
// SIGKILLs one ensemble member of mode (leader or follower), and checks
// that every range is led again, by one member, within
// ensembleRecoveryBound, on an epoch no older than before.
func ensembleMemberKilled(t *testing.T, mode string) {
	addrs := testinfra.ZooKeeperEnsembleAddrs(t)
	victim, ok := ensembleMember(addrs, mode)
	require.True(t, ok, "no member of the ensemble %v says it is a %s (zookeeper.sh status)", addrs, mode)
	leader, ok := ensembleLeader(addrs)
	require.True(t, ok, "no member of the ensemble %v says it leads (zookeeper.sh status)", addrs)
	// Whatever happens, the killed member is started again for the next test.
	t.Cleanup(func() {
		if _, err := testinfra.RunClusterScript("zookeeper", "up"); err != nil {
			t.Errorf("restarting the ensemble's killed member: %v", err)
		}
	})

	p := ensembleRoot(t, addrs) + "/ranges"
	b, log := newBoard(t), &termLog{}
	for _, name := range []string{"a", "b"} {
		startWith(t, p, name, b, func(cfg *Config) {
			cfg.Servers = addrs
			cfg.SessionTimeout = ensembleSessionTimeout
			cfg.SafetyMargin, cfg.HeartbeatInterval = 0, 0
			cfg.Work = log.wrap(cfg.Work)
		})
	}
	before := requireSpread(t, b, "a", "b")
	epochs := map[int]int64{}
	for r := range before {
		epochs[r] = b.lastEpoch(r)
	}

	_, port, err := net.SplitHostPort(victim)
	require.NoError(t, err)
	killed := time.Now()
	testinfra.ClusterScript(t, "zookeeper", "kill", port)
	t.Logf("killed the ensemble's %s %s (the script took %s; times below count from its start)", mode, victim, time.Since(killed))

	survivors := make([]string, 0, len(addrs)-1)
	for _, a := range addrs {
		if a != victim {
			survivors = append(survivors, a)
		}
	}
	var electedAt time.Time
	var newLeader string
	require.Eventually(t, func() bool {
		newLeader, ok = ensembleLeader(survivors)
		if ok {
			electedAt = time.Now()
		}
		return ok
	}, 30*time.Second, 10*time.Millisecond, "the surviving members have no leader")
	if mode == "follower" {
		require.Equal(t, leader, newLeader, "a follower's loss moved the ensemble's leadership")
	}
	// Past the kill, every member's session has either survived (and its
	// client reconnected) or expired within a session timeout: let that pass,
	// then every range must be led, by one member, on an epoch no older.
	time.Sleep(ensembleSessionTimeout + time.Second)
	s := requireSpread(t, b, "a", "b")
	total, longest, lastBack := log.gaps(killed)
	var sum time.Duration
	for _, g := range total {
		sum += g
	}
	back := "no range stopped"
	if !lastBack.IsZero() {
		back = "every range led again " + lastBack.Sub(killed).String() + " after the kill"
	}
	t.Logf("ensemble %s killed: ensemble leader %s after %s; %s; longest gap of one range %s, %d of %d ranges stopped, %s range-time unled in all (bound %s, session timeout %s)",
		mode, newLeader, electedAt.Sub(killed), back, longest, len(total), testRanges, sum, ensembleRecoveryBound, ensembleSessionTimeout)
	require.Less(t, longest, ensembleRecoveryBound, "a range went unled too long")
	if !lastBack.IsZero() {
		require.Less(t, lastBack.Sub(killed), ensembleRecoveryBound, "leadership came back too slowly")
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	resumed := 0
	defer func() {
		t.Logf("%d of %d ranges resumed on their own epoch, the others were led on a newer one", resumed, testRanges)
	}()
	for r := 0; r < testRanges; r++ {
		es := b.epochs[r]
		for i := 1; i < len(es); i++ {
			require.GreaterOrEqual(t, es[i], es[i-1], "range %d: epochs went down: %v", r, es)
		}
		require.GreaterOrEqual(t, es[len(es)-1], epochs[r], "range %d: the epoch after the failover is older than before it", r)
		if es[len(es)-1] == epochs[r] {
			// The same epoch is the same lock, so the same member: resumed, not taken over.
			require.Equal(t, before[r], s[r], "range %d kept its epoch but changed hands", r)
			resumed++
		}
	}
}
