//go:build integration

package rangeleader

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/testkit/testinfra"
)

var testCredentials = []Credential{{
	Scheme:  "digest",
	Payload: []byte(testinfra.ZooKeeperDigestUser + ":" + testinfra.ZooKeeperDigestPassword),
}}

func startWithIdentity(t *testing.T, path, name string, b *board) *Coordinator {
	t.Helper()
	c, err := New(Config{
		Servers: testinfra.ZooKeeperAddrs(t), Path: path, NodeID: name, Ranges: testRanges,
		SessionTimeout: testSessionTimeout,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Work:           b.work(name),
		Credentials:    testCredentials,
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(c.Stop)
	return c
}

// connectAs opens a session with the digest payload (nil: anonymous).
func connectAs(t *testing.T, digest string) *zk.Conn {
	t.Helper()
	conn := testinfra.ZooKeeperConnect(t, 5*time.Second)
	if digest != "" {
		require.NoError(t, conn.AddAuth("digest", []byte(digest)))
	}
	return conn
}

// With an identity, every node of a range group — the path and the parent
// the members create for it, members/, ranges/, each member node and each
// range lock — admits only that identity: a client without it, or with a
// wrong password, can read but cannot add a fake member, take or delete a
// lock, write a node or change an ACL. The members still spread the ranges,
// and when one leaves its ranges move, each to a newer epoch.
func TestRangeGroupNodesAdmitOnlyItsIdentity(t *testing.T) {
	_, root := testinfra.ZooKeeper(t)
	parent := root + "/groups"
	path := parent + "/prefetcher"
	b := newBoard(t)
	a := startWithIdentity(t, path, "a", b)
	startWithIdentity(t, path, "b", b)
	snap := requireSpread(t, b, "a", "b")

	authed := connectAs(t, string(testCredentials[0].Payload))
	members, _, err := authed.Children(path + "/members")
	require.NoError(t, err)
	require.Len(t, members, 2)
	locks, _, err := authed.Children(path + "/ranges")
	require.NoError(t, err)
	require.Len(t, locks, testRanges)
	member, lock := path+"/members/"+members[0], path+"/ranges/"+locks[0]
	want := NodeACL(testCredentials)
	for _, n := range []string{parent, path, path + "/members", path + "/ranges", member, lock} {
		acl, _, err := authed.GetACL(n)
		require.NoError(t, err)
		require.ElementsMatch(t, want, acl, n)
	}

	for name, conn := range map[string]*zk.Conn{
		"anonymous":      connectAs(t, ""),
		"wrong password": connectAs(t, testinfra.ZooKeeperDigestUser+":guessed"),
	} {
		t.Run(name, func(t *testing.T) {
			for _, n := range []string{parent, path, path + "/members", path + "/ranges", member, lock} {
				_, _, err := conn.Get(n)
				require.NoError(t, err, "%s: the world may read", n)
				_, err = conn.Set(n, []byte("intruder"), -1)
				require.ErrorIs(t, err, zk.ErrNoAuth, "%s: set", n)
				_, err = conn.SetACL(n, zk.WorldACL(zk.PermAll), -1)
				require.ErrorIs(t, err, zk.ErrNoAuth, "%s: setAcl", n)
			}
			for _, n := range []string{member, lock, path + "/members", path + "/ranges"} {
				require.ErrorIs(t, conn.Delete(n, -1), zk.ErrNoAuth, "%s: delete", n)
			}
			_, err := conn.Create(path+"/members/m_fake", []byte("intruder"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
			require.ErrorIs(t, err, zk.ErrNoAuth, "a fake member")
			_, err = conn.CreateProtectedEphemeralSequential(path+"/members/"+memberPrefix, []byte("intruder"), zk.WorldACL(zk.PermAll))
			require.ErrorIs(t, err, zk.ErrNoAuth, "a fake member")
			_, err = conn.Create(path+"/ranges/"+LockName(testRanges+1), []byte("intruder"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
			require.ErrorIs(t, err, zk.ErrNoAuth, "a lock")
		})
	}
	require.Equal(t, snap, b.snapshot(), "no range moved")

	before := map[int]int64{}
	for r, m := range snap {
		if m == "a" {
			before[r] = b.lastEpoch(r)
		}
	}
	a.Stop()
	requireSpread(t, b, "b")
	for r, e := range before {
		require.Greater(t, b.lastEpoch(r), e, "range %d: the new leader's epoch must be larger", r)
	}
}

// A member with a wrong password cannot join a group whose nodes admit
// another identity, so it takes no range from the members that have it.
func TestWrongIdentityCannotJoinTheGroup(t *testing.T) {
	_, root := testinfra.ZooKeeper(t)
	path := root + "/group"
	b := newBoard(t)
	startWithIdentity(t, path, "right", b)
	snap := requireSpread(t, b, "right")

	wrong, err := New(Config{
		Servers: testinfra.ZooKeeperAddrs(t), Path: path, NodeID: "wrong", Ranges: testRanges,
		SessionTimeout: testSessionTimeout,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Work:           b.work("wrong"),
		Credentials:    []Credential{{Scheme: "digest", Payload: []byte(testinfra.ZooKeeperDigestUser + ":guessed")}},
	})
	require.NoError(t, err)
	require.NoError(t, wrong.Start(context.Background()))
	t.Cleanup(wrong.Stop)
	require.Never(t, func() bool { return len(wrong.Led()) > 0 }, 3*time.Second, 50*time.Millisecond)
	require.Equal(t, snap, b.snapshot())
	members, _, err := connectAs(t, "").Children(path + "/members")
	require.NoError(t, err)
	require.Len(t, members, 1, "the wrong identity joined")
}
