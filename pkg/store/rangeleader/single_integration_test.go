//go:build integration

package rangeleader

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/testkit/testinfra"
)

// A single leader is one range: these tests run groups of one range, where
// one member leads and the others stand by.

// one makes a member of a one-range group.
func one(cfg *Config) { cfg.Ranges = 1 }

// leader is the member working the only range, "" when none.
func (b *board) leader() string { return b.snapshot()[0] }

func (b *board) awaitLeader(t *testing.T, within time.Duration) string {
	t.Helper()
	var who string
	require.Eventually(t, func() bool { who = b.leader(); return who != "" }, within, 5*time.Millisecond, "nobody leads the range")
	return who
}

func (b *board) times(epoch int64) (began, ended time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.began[epoch], b.ended[epoch]
}

func (b *board) lastCause() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.causes) == 0 {
		return nil
	}
	return b.causes[len(b.causes)-1]
}

// The lone member leads; its lock's czxid is the epoch and names its
// member node, whose data is its node id; Stop ends the term and closing
// the session deletes the lock at once.
func TestOneRangeSingleMemberLeads(t *testing.T) {
	path, b := groupPath(t), newBoard(t)
	a := startWith(t, path, "a", b, one)
	require.Equal(t, "a", b.awaitLeader(t, 10*time.Second))
	require.Equal(t, []int{0}, a.Led())
	require.NoError(t, a.Check(context.Background()))
	epoch := b.lastEpoch(0)
	require.Positive(t, epoch)

	conn := testinfra.ZooKeeperConnect(t, 5*time.Second)
	lock := path + "/ranges/" + LockName(0)
	member, st, err := conn.Get(lock)
	require.NoError(t, err)
	require.Equal(t, epoch, st.Czxid)
	data, _, err := conn.Get(path + "/members/" + string(member))
	require.NoError(t, err)
	require.Equal(t, "a", string(data))

	a.Stop()
	require.Empty(t, b.snapshot())
	require.ErrorIs(t, b.lastCause(), ErrStopped)
	ok, _, err := conn.Exists(lock)
	require.NoError(t, err)
	require.False(t, ok, "closing the session removed the lock at once")
}

// Of two members of one range exactly one leads, heartbeat after
// heartbeat; the board fails the test if both ever work it at once.
func TestOneRangeExactlyOneLeads(t *testing.T) {
	path, b := groupPath(t), newBoard(t)
	a := startWith(t, path, "a", b, one)
	c := startWith(t, path, "b", b, one)
	first := b.awaitLeader(t, 10*time.Second)
	leader, standby := a, c
	if first == "b" {
		leader, standby = c, a
	}
	require.Never(t, func() bool {
		return b.leader() != first || len(standby.Led()) != 0 || len(leader.Led()) != 1
	}, 4*testSessionTimeout, testSessionTimeout/4, "leadership of the range moved, or both led")
}

// Stop hands the range to the standby at once, on a larger epoch.
func TestOneRangeStopHandsOverToTheStandby(t *testing.T) {
	path, b := groupPath(t), newBoard(t)
	a := startWith(t, path, "a", b, one)
	require.Equal(t, "a", b.awaitLeader(t, 10*time.Second))
	first := b.lastEpoch(0)
	startWith(t, path, "b", b, one)
	conn := testinfra.ZooKeeperConnect(t, 5*time.Second)
	require.Eventually(t, func() bool {
		ms, _, err := conn.Children(path + "/members")
		return err == nil && len(ms) == 2
	}, 10*time.Second, 10*time.Millisecond, "b never joined")

	stopped := time.Now()
	a.Stop()
	require.ErrorIs(t, b.lastCause(), ErrStopped)
	require.Eventually(t, func() bool { return b.leader() == "b" }, 10*time.Second, time.Millisecond)
	t.Logf("handover after Stop took %s", time.Since(stopped))
	require.Greater(t, b.lastEpoch(0), first)
}

// A leader cut off from ZooKeeper stops as soon as its connection drops,
// before the standby leads (once the server expires the old session); back
// on the network it joins again with a fresh member node and stands by;
// epochs strictly increase across the three terms.
func TestOneRangeCutOffLeaderStopsBeforeTheStandbyLeads(t *testing.T) {
	path, b := groupPath(t), newBoard(t)
	var fd faultDialer
	a := startWith(t, path, "a", b, func(c *Config) { one(c); c.Dialer = fd.Dial })
	t.Cleanup(fd.Heal) // runs before a.Stop (cleanups are LIFO)
	require.Equal(t, "a", b.awaitLeader(t, 10*time.Second))
	first := b.lastEpoch(0)
	c := startWith(t, path, "b", b, one)

	cut := time.Now()
	fd.Partition()
	require.Eventually(t, func() bool { return b.leader() != "a" }, testSessionTimeout, time.Millisecond, "the cut leader kept working")
	require.ErrorIs(t, b.lastCause(), ErrConnectionLost)
	require.Equal(t, "b", b.awaitLeader(t, 5*testSessionTimeout))
	second := b.lastEpoch(0)
	_, firstEnded := b.times(first)
	secondBegan, _ := b.times(second)
	t.Logf("old leader stopped %s after the cut; standby led %s after it", firstEnded.Sub(cut), secondBegan.Sub(cut))
	require.True(t, firstEnded.Before(secondBegan), "the old term must end before the new one begins")
	require.Greater(t, second, first)

	fd.Heal()
	require.Never(t, func() bool { return len(a.Led()) > 0 }, 2*testSessionTimeout, 20*time.Millisecond, "the old leader took the range back")
	c.Stop()
	require.Eventually(t, func() bool { return b.leader() == "a" }, 10*time.Second, time.Millisecond)
	require.Greater(t, b.lastEpoch(0), second)
}

// A leader whose packets silently vanish sees no disconnect (its reads
// never time out here); its own trust window must end its work, before
// the server could expire the session and let the standby in.
func TestOneRangeBlackholedLeaderStopsOnTheTrustWindow(t *testing.T) {
	path, b := groupPath(t), newBoard(t)
	var fd faultDialer
	a := startWith(t, path, "a", b, func(c *Config) {
		one(c)
		c.Dialer = fd.Dial
		c.SafetyMargin = testSessionTimeout / 2
		c.HeartbeatInterval = testSessionTimeout / 8
	})
	t.Cleanup(fd.Heal)
	require.Equal(t, "a", b.awaitLeader(t, 10*time.Second))
	first := b.lastEpoch(0)
	startWith(t, path, "b", b, one)

	cut := time.Now()
	fd.Blackhole()
	require.Eventually(t, func() bool { return b.leader() != "a" }, testSessionTimeout, time.Millisecond, "the blackholed leader kept working")
	require.ErrorIs(t, b.lastCause(), ErrTrustLapsed)
	require.Equal(t, "b", b.awaitLeader(t, 5*testSessionTimeout))
	second := b.lastEpoch(0)
	_, firstEnded := b.times(first)
	secondBegan, _ := b.times(second)
	t.Logf("the trust window ended the old term %s after the blackhole; standby led %s after it", firstEnded.Sub(cut), secondBegan.Sub(cut))
	require.True(t, firstEnded.Before(secondBegan))
	require.Greater(t, second, first)

	fd.Heal()
	require.Never(t, func() bool { return len(a.Led()) > 0 }, 2*testSessionTimeout, 20*time.Millisecond)
}

// Three members of one range; the leader is stopped again and again (and
// rejoins at the back): every new leader's epoch is larger than all before.
func TestOneRangeEpochsStrictlyIncreaseAcrossTerms(t *testing.T) {
	path, b := groupPath(t), newBoard(t)
	members := map[string]*Coordinator{}
	for _, id := range []string{"a", "b", "c"} {
		members[id] = startWith(t, path, id, b, one)
	}
	var last int64
	for round := range 4 {
		who := b.awaitLeader(t, 10*time.Second)
		epoch := b.lastEpoch(0)
		require.Greater(t, epoch, last, "round %d", round)
		last = epoch
		members[who].Stop()
		members[who] = startWith(t, path, who, b, one)
	}
}

// The server clamps the requested timeout; the coordinator trusts the
// smaller of the two, learned from the client's handshake log line.
func TestTheServersMaxSessionTimeoutIsTrusted(t *testing.T) {
	max := serverMaxSessionTimeout(t)
	path, b := groupPath(t), newBoard(t)
	a := startWith(t, path, "a", b, func(c *Config) {
		one(c)
		c.SessionTimeout = max + 30*time.Second
		c.SafetyMargin = time.Second
		c.HeartbeatInterval = time.Second
	})
	b.awaitLeader(t, 10*time.Second)
	require.Equal(t, max, a.SessionTimeout())
}

// serverMaxSessionTimeout asks the server with the "conf" four-letter word.
func serverMaxSessionTimeout(t *testing.T) time.Duration {
	t.Helper()
	c, err := net.DialTimeout("tcp", testinfra.ZooKeeperAddrs(t)[0], 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("conf"))
	require.NoError(t, err)
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "maxSessionTimeout="); ok {
			ms, err := strconv.Atoi(strings.TrimSpace(v))
			require.NoError(t, err)
			return time.Duration(ms) * time.Millisecond
		}
	}
	t.Fatal(fmt.Errorf("conf: no maxSessionTimeout (%v)", sc.Err()))
	return 0
}
