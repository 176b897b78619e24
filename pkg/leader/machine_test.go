package leader

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTransitionTable(t *testing.T) {
	cases := []struct {
		from State
		ev   event
		want State
	}{
		// Connecting waits for a session and nothing else.
		{StateConnecting, evSession, StateCampaigning},
		{StateConnecting, evDisconnected, StateConnecting},
		{StateConnecting, evExpired, StateConnecting},
		{StateConnecting, evElected, StateConnecting},
		// Campaigning ends in a place in line, or in suspicion.
		{StateCampaigning, evElected, StateLeading},
		{StateCampaigning, evStandby, StateFollowing},
		{StateCampaigning, evNodeLost, StateCampaigning},
		{StateCampaigning, evFailed, StateSuspect},
		{StateCampaigning, evDisconnected, StateSuspect},
		{StateCampaigning, evExpired, StateConnecting},
		// Following wakes only for its predecessor or the session.
		{StateFollowing, evPredecessorGone, StateCampaigning},
		{StateFollowing, evSession, StateCampaigning},
		{StateFollowing, evDisconnected, StateSuspect},
		{StateFollowing, evExpired, StateConnecting},
		{StateFollowing, evConfirmed, StateFollowing},
		// Leading is left on any doubt.
		{StateLeading, evConfirmed, StateLeading},
		{StateLeading, evFailed, StateLeading},
		{StateLeading, evDisconnected, StateSuspect},
		{StateLeading, evTrustLapsed, StateSuspect},
		{StateLeading, evExpired, StateConnecting},
		{StateLeading, evNodeLost, StateCampaigning},
		{StateLeading, evSession, StateCampaigning},
		// Suspect keeps its node and re-verifies once it can.
		{StateSuspect, evSession, StateCampaigning},
		{StateSuspect, evConfirmed, StateCampaigning},
		{StateSuspect, evNodeLost, StateCampaigning},
		{StateSuspect, evFailed, StateSuspect},
		{StateSuspect, evDisconnected, StateSuspect},
		{StateSuspect, evExpired, StateConnecting},
		{StateSuspect, evElected, StateSuspect},
	}
	for _, c := range cases {
		require.Equal(t, c.want, transition(c.from, c.ev), "%s --%s-->", c.from, c.ev)
	}
}

// Every state answers every event, and the safety properties hold for all
// pairs, not just the ones listed above.
func TestTransitionInvariants(t *testing.T) {
	states := []State{StateStopped, StateConnecting, StateCampaigning, StateFollowing, StateLeading, StateSuspect}
	for _, s := range states {
		for ev := evSession; ev <= evStop; ev++ {
			next := transition(s, ev)
			if ev == evStop || s == StateStopped {
				require.Equal(t, StateStopped, next, "%s --%s-->", s, ev)
				continue
			}
			switch ev {
			case evDisconnected, evExpired, evTrustLapsed:
				require.NotEqual(t, StateLeading, next, "%s --%s--> must not lead", s, ev)
			}
			if ev == evExpired {
				require.Equal(t, StateConnecting, next, "expiry always restarts with a fresh node")
			}
			// Only a campaign can make a leader.
			if next == StateLeading && s != StateLeading {
				require.Equal(t, evElected, ev, "%s --%s--> leading", s, ev)
				require.Equal(t, StateCampaigning, s)
			}
			require.NotEmpty(t, next.String())
		}
	}
}

func TestCandidateOrderBySequenceNotName(t *testing.T) {
	// GUID prefixes sort differently from creation order.
	children := []string{
		"_c_ffff0000000000000000000000000000-n_0000000003",
		"_c_00000000000000000000000000000000-n_0000000007",
		"_c_aaaa0000000000000000000000000000-n_0000000001",
		"lock-0000000000", // a stranger's node: ignored
		"n_notanumber",
	}
	cands := sortCandidates(children)
	require.Len(t, cands, 3)
	require.Equal(t, []int64{1, 3, 7}, []int64{cands[0].seq, cands[1].seq, cands[2].seq})

	pred, found := position(cands, "_c_aaaa0000000000000000000000000000-n_0000000001")
	require.True(t, found)
	require.Empty(t, pred, "lowest sequence leads")

	pred, found = position(cands, "_c_00000000000000000000000000000000-n_0000000007")
	require.True(t, found)
	require.Equal(t, "_c_ffff0000000000000000000000000000-n_0000000003", pred, "watch only the predecessor")

	_, found = position(cands, "_c_bbbb0000000000000000000000000000-n_0000000002")
	require.False(t, found)
}

func TestBaseName(t *testing.T) {
	require.Equal(t, "n_1", baseName("/a/b/n_1"))
	require.Equal(t, "n_1", baseName("n_1"))
}

func TestTrustDeadline(t *testing.T) {
	confirmed := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, confirmed.Add(3*time.Second), trustDeadline(confirmed, 4*time.Second, time.Second))
}

func TestEffectiveTimeoutTakesTheSmaller(t *testing.T) {
	require.Equal(t, 4*time.Second, effectiveTimeout(4*time.Second, 0), "unknown: trust what we asked for")
	require.Equal(t, 2*time.Second, effectiveTimeout(4*time.Second, 2*time.Second), "server clamped it down")
	require.Equal(t, 4*time.Second, effectiveTimeout(4*time.Second, 6*time.Second), "server raised it: ours is safe")
}

func TestZKLoggerCapturesNegotiatedTimeout(t *testing.T) {
	l := &zkLogger{logger: discardLogger()}
	l.Printf("connected to %s", "127.0.0.1:2181")
	require.Zero(t, l.negotiated.Load())
	l.Printf(zkAuthenticatedFormat, int64(42), int32(2500))
	require.Equal(t, int64(2500*time.Millisecond), l.negotiated.Load())
}

func TestConfigValidate(t *testing.T) {
	_, err := New(Config{})
	require.Error(t, err)
	for _, field := range []string{"servers", "path", "node id"} {
		require.ErrorContains(t, err, field)
	}

	_, err = New(Config{Servers: []string{"x:1"}, Path: "/a/", NodeID: "n"})
	require.ErrorContains(t, err, "path")

	_, err = New(Config{Servers: []string{"x:1"}, Path: "/a", NodeID: "n", SessionTimeout: 4 * time.Second, SafetyMargin: time.Second, HeartbeatInterval: 3 * time.Second})
	require.ErrorContains(t, err, "heartbeat interval")

	_, err = New(Config{Servers: []string{"x:1"}, Path: "/a", NodeID: "n", Credentials: []Credential{{Scheme: "digest"}}})
	require.ErrorContains(t, err, "credentials[0]: scheme and payload are required")

	e, err := New(Config{Servers: []string{"x:1"}, Path: "/sundial/elections/p", NodeID: "n"})
	require.NoError(t, err)
	require.Equal(t, 4*time.Second, e.cfg.SessionTimeout)
	require.Equal(t, time.Second, e.cfg.SafetyMargin)
	require.Equal(t, StateStopped, e.State())
	e.Stop() // before Start: a no-op
}
