//go:build integration

package leader

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/testkit/testinfra"
)

// Tests run against the real ZooKeeper started by deploy/local/infra.sh.
// Each test campaigns under its own election path, so tests never see each
// other's candidates.

const testSessionTimeout = 2 * time.Second

func zkServers(t *testing.T) []string { return testinfra.ZooKeeperAddrs(t) }

// electionPath is an election under the test's own ZooKeeper root, which
// testinfra deletes when the test ends.
func electionPath(t *testing.T) string {
	t.Helper()
	_, root := testinfra.ZooKeeper(t)
	return root + "/election"
}

type candidateOpt func(*Config)

func startCandidate(t *testing.T, path, id string, opts ...candidateOpt) *Elector {
	t.Helper()
	cfg := Config{
		Servers:        zkServers(t),
		Path:           path,
		NodeID:         id,
		SessionTimeout: testSessionTimeout,
		Logger:         testLogger(t).With("candidate", id),
	}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, e.Start(context.Background()))
	t.Cleanup(e.Stop)
	return e
}

func withDialer(d *faultDialer) candidateOpt {
	return func(c *Config) { c.Dialer = d.Dial }
}

// awaitTerm waits for the elector's next term.
func awaitTerm(t *testing.T, e *Elector, within time.Duration) Term {
	t.Helper()
	select {
	case term := <-e.Terms():
		return term
	case <-time.After(within):
		t.Fatalf("no term within %s (state %s)", within, e.State())
		return Term{}
	}
}

func awaitState(t *testing.T, e *Elector, want State, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return e.State() == want }, within, 10*time.Millisecond,
		"state %s, want %s", e.State(), want)
}

func awaitEnd(t *testing.T, term Term, within time.Duration) {
	t.Helper()
	select {
	case <-term.Ctx.Done():
	case <-time.After(within):
		t.Fatalf("term %d still open after %s", term.Epoch, within)
	}
}

// endTimes records when each term's context was cancelled.
type endTimes struct {
	mu sync.Mutex
	at map[int64]time.Time
}

func (w *endTimes) watch(term Term) {
	context.AfterFunc(term.Ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.at == nil {
			w.at = map[int64]time.Time{}
		}
		w.at[term.Epoch] = time.Now()
	})
}

func (w *endTimes) get(epoch int64) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.at[epoch]
}

func noTerm(t *testing.T, e *Elector) {
	t.Helper()
	select {
	case term := <-e.Terms():
		t.Fatalf("unexpected term %d on %s", term.Epoch, e.cfg.NodeID)
	default:
	}
}

func TestSingleCandidateLeads(t *testing.T) {
	path := electionPath(t)
	a := startCandidate(t, path, "a")
	term := awaitTerm(t, a, 10*time.Second)
	require.Positive(t, term.Epoch)
	require.NoError(t, term.Ctx.Err())
	require.Equal(t, StateLeading, a.State())
	require.True(t, strings.HasPrefix(term.Node, path+"/"), term.Node)
	require.NoError(t, a.Check(context.Background()))

	// The node's data names the leader and its czxid is the epoch.
	conn := testinfra.ZooKeeperConnect(t, 5*time.Second)
	data, st, err := conn.Get(term.Node)
	require.NoError(t, err)
	require.Equal(t, "a", string(data))
	require.Equal(t, term.Epoch, st.Czxid)

	a.Stop()
	awaitEnd(t, term, time.Second)
	require.ErrorIs(t, context.Cause(term.Ctx), ErrStopped)
	require.Equal(t, StateStopped, a.State())
	// Closing the session removed the node at once.
	ok, _, err := conn.Exists(term.Node)
	require.NoError(t, err)
	require.False(t, ok)
}

func TestTwoCandidatesExactlyOneLeads(t *testing.T) {
	path := electionPath(t)
	a := startCandidate(t, path, "a")
	b := startCandidate(t, path, "b")

	var leader, standby *Elector
	var term Term
	select {
	case term = <-a.Terms():
		leader, standby = a, b
	case term = <-b.Terms():
		leader, standby = b, a
	case <-time.After(10 * time.Second):
		t.Fatal("nobody leads")
	}
	awaitState(t, standby, StateFollowing, 10*time.Second)
	require.Equal(t, StateLeading, leader.State())
	noTerm(t, standby)
	// Heartbeats keep the leader leading while the standby keeps following.
	hbs := 0
	require.Eventually(t, func() bool {
		hbs++
		return hbs > 3 && term.Ctx.Err() == nil && leader.State() == StateLeading && standby.State() == StateFollowing
	}, 10*time.Second, testSessionTimeout/2)
	noTerm(t, standby)
}

func TestStopHandsOverToStandby(t *testing.T) {
	path := electionPath(t)
	a := startCandidate(t, path, "a")
	first := awaitTerm(t, a, 10*time.Second)
	b := startCandidate(t, path, "b")
	awaitState(t, b, StateFollowing, 10*time.Second)

	stopped := time.Now()
	a.Stop()
	require.ErrorIs(t, context.Cause(first.Ctx), ErrStopped)
	second := awaitTerm(t, b, 10*time.Second)
	t.Logf("handover after Stop took %s", time.Since(stopped))
	require.Greater(t, second.Epoch, first.Epoch)
}

// A candidate cut off from ZooKeeper steps down as soon as its connection
// drops; the standby leads once the server expires the old session; the
// old candidate comes back with a fresh node and follows; epochs strictly
// increase across all three terms.
func TestPartitionedLeaderStepsDownAndRecampaigns(t *testing.T) {
	path := electionPath(t)
	var fd faultDialer
	var ends endTimes
	a := startCandidate(t, path, "a", withDialer(&fd))
	t.Cleanup(fd.Heal) // runs before a.Stop (cleanups are LIFO)
	first := awaitTerm(t, a, 10*time.Second)
	ends.watch(first)
	b := startCandidate(t, path, "b")
	awaitState(t, b, StateFollowing, 10*time.Second)

	cut := time.Now()
	fd.Partition()
	awaitEnd(t, first, testSessionTimeout)
	require.ErrorIs(t, context.Cause(first.Ctx), ErrConnectionLost)

	second := awaitTerm(t, b, 5*testSessionTimeout)
	ends.watch(second)
	began := time.Now()
	t.Logf("old leader stepped down %s after the partition; standby led %s after it",
		ends.get(first.Epoch).Sub(cut), began.Sub(cut))
	require.True(t, ends.get(first.Epoch).Before(began), "the old term must end before the new one begins")
	require.Greater(t, second.Epoch, first.Epoch)
	require.NotEqual(t, StateLeading, a.State())

	// Back on the network, a finds its session expired, campaigns with a
	// fresh node, and lines up behind b.
	fd.Heal()
	awaitState(t, a, StateFollowing, 10*time.Second)
	noTerm(t, a)

	b.Stop()
	third := awaitTerm(t, a, 10*time.Second)
	require.Greater(t, third.Epoch, second.Epoch)
	require.NotEqual(t, first.Node, third.Node, "re-campaigned with a fresh node")
}

// A leader whose packets silently vanish sees no disconnect (its reads
// never time out here); its own trust window must end the term, and must
// do so before the server could expire the session and let the standby in.
func TestBlackholedLeaderStepsDownOnTrustWindow(t *testing.T) {
	path := electionPath(t)
	var fd faultDialer
	var ends endTimes
	a := startCandidate(t, path, "a", withDialer(&fd), func(c *Config) {
		c.SafetyMargin = testSessionTimeout / 2
		c.HeartbeatInterval = testSessionTimeout / 8
	})
	t.Cleanup(fd.Heal)
	first := awaitTerm(t, a, 10*time.Second)
	ends.watch(first)
	b := startCandidate(t, path, "b")
	awaitState(t, b, StateFollowing, 10*time.Second)

	cut := time.Now()
	fd.Blackhole()
	awaitEnd(t, first, testSessionTimeout)
	require.ErrorIs(t, context.Cause(first.Ctx), ErrTrustLapsed)

	second := awaitTerm(t, b, 5*testSessionTimeout)
	began := time.Now()
	t.Logf("trust window ended the old term %s after the blackhole; standby led %s after it",
		ends.get(first.Epoch).Sub(cut), began.Sub(cut))
	require.True(t, ends.get(first.Epoch).Before(began))
	require.Greater(t, second.Epoch, first.Epoch)
	require.Equal(t, StateSuspect, a.State())

	fd.Heal()
	awaitState(t, a, StateFollowing, 10*time.Second)
	noTerm(t, a)
}

// Three candidates; the leader is stopped repeatedly and every new leader's
// epoch is larger than all before it.
func TestEpochsStrictlyIncreaseAcrossTerms(t *testing.T) {
	path := electionPath(t)
	electors := map[string]*Elector{}
	for _, id := range []string{"a", "b", "c"} {
		electors[id] = startCandidate(t, path, id)
	}
	var last int64
	for round := 0; round < 4; round++ {
		term, who := awaitAnyTerm(t, electors, 10*time.Second)
		require.Greater(t, term.Epoch, last, "round %d", round)
		last = term.Epoch
		electors[who].Stop()
		awaitEnd(t, term, time.Second)
		// Rejoin under the same name as a new candidate at the back.
		electors[who] = startCandidate(t, path, who)
	}
}

func awaitAnyTerm(t *testing.T, electors map[string]*Elector, within time.Duration) (Term, string) {
	t.Helper()
	ids := make([]string, 0, len(electors))
	cases := make([]reflect.SelectCase, 0, len(electors)+1)
	for id, e := range electors {
		ids = append(ids, id)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(e.Terms())})
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(within))})
	i, v, _ := reflect.Select(cases)
	if i == len(ids) {
		t.Fatalf("no term within %s", within)
	}
	return v.Interface().(Term), ids[i]
}

// The server clamps the requested timeout; the elector trusts the smaller
// of the two, learned from the client's handshake log line.
func TestNegotiatedSessionTimeoutIsTrusted(t *testing.T) {
	max := serverMaxSessionTimeout(t)
	path := electionPath(t)
	a := startCandidate(t, path, "a", func(c *Config) {
		c.SessionTimeout = max + 30*time.Second
		c.SafetyMargin = time.Second
		c.HeartbeatInterval = time.Second
	})
	awaitTerm(t, a, 10*time.Second)
	require.Equal(t, max, a.SessionTimeout())
}

// serverMaxSessionTimeout asks the server with the "conf" four-letter word.
func serverMaxSessionTimeout(t *testing.T) time.Duration {
	t.Helper()
	c, err := net.DialTimeout("tcp", zkServers(t)[0], 5*time.Second)
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
	t.Fatal(fmt.Errorf("conf: no maxSessionTimeout: %w", errors.Join(sc.Err())))
	return 0
}
