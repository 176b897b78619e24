//go:build integration

package leader_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/connsec"
	"github.com/sundialhq/sundial/pkg/leader"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// testIdentity is the digest identity testinfra's cleanup deletes with.
func testIdentity() leader.Security {
	return leader.Security{
		Username: testinfra.ZooKeeperDigestUser,
		Password: connsec.Password{Value: connsec.NewSecret(testinfra.ZooKeeperDigestPassword)},
	}
}

func identityConfig(t *testing.T, z leader.Security, path, id string, log *slog.Logger) leader.Config {
	t.Helper()
	cfg := leader.Config{
		Servers: testinfra.ZooKeeperAddrs(t), Path: path, NodeID: id,
		SessionTimeout: 2 * time.Second,
		Logger:         log,
	}
	require.NoError(t, z.Apply(&cfg))
	return cfg
}

func startElector(t *testing.T, cfg leader.Config) *leader.Elector {
	t.Helper()
	e, err := leader.New(cfg)
	require.NoError(t, err)
	require.NoError(t, e.Start(context.Background()))
	t.Cleanup(e.Stop)
	return e
}

// requireClosed asserts that conn may read node but not create below it,
// delete it, write it or change its ACL.
func requireClosed(t *testing.T, conn *zk.Conn, node string) {
	t.Helper()
	_, _, err := conn.Get(node)
	require.NoError(t, err, "%s: the world may read", node)
	_, err = conn.Create(node+"/intruder", nil, 0, zk.WorldACL(zk.PermAll))
	require.ErrorIs(t, err, zk.ErrNoAuth, "%s: create below", node)
	_, err = conn.Set(node, []byte("intruder"), -1)
	require.ErrorIs(t, err, zk.ErrNoAuth, "%s: set", node)
	_, err = conn.SetACL(node, zk.WorldACL(zk.PermAll), -1)
	require.ErrorIs(t, err, zk.ErrNoAuth, "%s: setAcl", node)
}

// requireUndeletable asserts that conn cannot delete node (which takes the
// DELETE permission on its parent).
func requireUndeletable(t *testing.T, conn *zk.Conn, node string) {
	t.Helper()
	err := conn.Delete(node, -1)
	require.ErrorIs(t, err, zk.ErrNoAuth, "%s: delete", node)
}

// With an identity, every node the elector creates — the parent it makes
// for the election path, the path, the candidates — admits only that
// identity and lets the world read: a client without it, or with a wrong
// password, can neither add a candidate, delete the leader's node, write
// nor change an ACL, and the standby still takes over when the leader
// stops.
func TestElectorNodesAdmitOnlyItsIdentity(t *testing.T) {
	_, root := testinfra.ZooKeeper(t)
	parent := root + "/elections"
	path := parent + "/prefetcher"
	a := startElector(t, identityConfig(t, testIdentity(), path, "a", slog.New(slog.DiscardHandler)))
	require.Eventually(t, func() bool { return a.State() == leader.StateLeading }, 20*time.Second, 20*time.Millisecond)
	b := startElector(t, identityConfig(t, testIdentity(), path, "b", slog.New(slog.DiscardHandler)))
	require.Eventually(t, func() bool { return b.State() == leader.StateFollowing }, 20*time.Second, 20*time.Millisecond)

	authed, _ := zkConnect(t, testIdentity(), nil)
	candidates, _, err := authed.Children(path)
	require.NoError(t, err)
	require.Len(t, candidates, 2)
	want := leader.NodeACL([]leader.Credential{{Scheme: "digest", Payload: []byte(testinfra.ZooKeeperDigestUser + ":" + testinfra.ZooKeeperDigestPassword)}})
	for _, n := range []string{parent, path, path + "/" + candidates[0], path + "/" + candidates[1]} {
		acl, _, err := authed.GetACL(n)
		require.NoError(t, err)
		require.ElementsMatch(t, want, acl, n)
	}

	anonymous := testinfra.ZooKeeperConnect(t, 5*time.Second)
	wrong, _ := zkConnect(t, leader.Security{Username: testinfra.ZooKeeperDigestUser, Password: connsec.Password{Value: connsec.NewSecret("not-it")}}, nil)
	for name, conn := range map[string]*zk.Conn{"anonymous": anonymous, "wrong password": wrong} {
		t.Run(name, func(t *testing.T) {
			for _, n := range []string{parent, path, path + "/" + candidates[0]} {
				requireClosed(t, conn, n)
			}
			for _, c := range candidates {
				requireUndeletable(t, conn, path+"/"+c)
			}
			requireUndeletable(t, conn, path)
		})
	}
	require.Equal(t, leader.StateLeading, a.State(), "the leader kept its node")

	a.Stop()
	require.Eventually(t, func() bool { return b.State() == leader.StateLeading }, 20*time.Second, 20*time.Millisecond,
		"the standby takes over on the closed path")
}

// A candidate with the wrong password cannot take over: it is refused at
// start (Check names the path), and an elector started anyway never gets
// a node in line, while the right one keeps leading.
func TestWrongIdentityCannotTakeOver(t *testing.T) {
	_, root := testinfra.ZooKeeper(t)
	path := root + "/election"
	right := startElector(t, identityConfig(t, testIdentity(), path, "right", slog.New(slog.DiscardHandler)))
	require.Eventually(t, func() bool { return right.State() == leader.StateLeading }, 20*time.Second, 20*time.Millisecond)

	bad := leader.Security{Username: testinfra.ZooKeeperDigestUser, Password: connsec.Password{Value: connsec.NewSecret("guessed")}}
	cfg := identityConfig(t, bad, path, "wrong", slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := leader.Check(ctx, cfg)
	require.ErrorIs(t, err, connsec.ErrRefused)
	require.ErrorIs(t, err, leader.ErrNotAdmitted)
	require.ErrorContains(t, err, path+": ")
	require.ErrorContains(t, err, "a wrong --zk-username or --zk-password?")

	// Nor does an elector without any identity (open ACLs) pass Check.
	open := identityConfig(t, leader.Security{}, path, "open", slog.New(slog.DiscardHandler))
	err = leader.Check(ctx, open)
	require.ErrorIs(t, err, leader.ErrNotAdmitted)
	require.ErrorContains(t, err, "give --zk-username and --zk-password-file")

	wrong := startElector(t, cfg)
	require.Never(t, func() bool {
		s := wrong.State()
		return s == leader.StateLeading || s == leader.StateFollowing
	}, 3*time.Second, 50*time.Millisecond, "a candidate with a wrong password got a node in line")
	require.Equal(t, leader.StateLeading, right.State())
}

// syncBuffer is a log destination the elector's goroutines and the test
// share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A tree an older version left world-writable (the election path and a
// node below it) is given the identity's ACL by the startup check, which
// logs each path it tightened and never the password; a tree whose ACL
// admits only another identity is refused, naming the node and the fix.
func TestCheckTightensWorldWritableTree(t *testing.T) {
	conn, root := testinfra.ZooKeeper(t)
	path := root + "/election"
	leftover := path + "/ranges"
	for _, p := range []string{path, leftover} {
		_, err := conn.Create(p, []byte("old"), 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	var logs syncBuffer
	cfg := identityConfig(t, testIdentity(), path, "upgraded", slog.New(slog.NewTextHandler(&logs, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, leader.Check(ctx, cfg))

	want := leader.NodeACL(cfg.Credentials)
	// The server shows a digest's hash only to a client that may change
	// the ACL (others see "sundial:x").
	authed, _ := zkConnect(t, testIdentity(), nil)
	for _, p := range []string{path, leftover} {
		acl, _, err := authed.GetACL(p)
		require.NoError(t, err)
		require.ElementsMatch(t, want, acl, p)
		require.Contains(t, logs.String(), "path="+p+"\n", "the tightened path is logged")
		requireClosed(t, conn, p)
	}
	requireUndeletable(t, conn, leftover)
	require.NotContains(t, logs.String(), testinfra.ZooKeeperDigestPassword)

	// Tightened once: a second check changes nothing and logs nothing.
	before := logs.String()
	require.NoError(t, leader.Check(ctx, cfg))
	require.Equal(t, before, logs.String())

	// Another identity's tree, world-readable but closed to ours.
	other := root + "/other"
	_, err := conn.Create(other, nil, 0, append(zk.DigestACL(zk.PermAll, "someone-else", "pw"), zk.WorldACL(zk.PermRead)...))
	require.NoError(t, err)
	err = leader.Check(ctx, identityConfig(t, testIdentity(), other, "refused", slog.New(slog.DiscardHandler)))
	require.ErrorIs(t, err, leader.ErrNotAdmitted)
	require.ErrorIs(t, err, connsec.ErrRefused)
	require.ErrorContains(t, err, other+": ")
	require.ErrorContains(t, err, "setAcl -R")
}

// An elector with an identity, started on a tree left world-writable,
// tightens the nodes it creates but not the ones it found (Check does
// that); Tighten then closes the rest without disturbing the leader.
func TestTightenUnderARunningElector(t *testing.T) {
	conn, root := testinfra.ZooKeeper(t)
	path := root + "/election"
	_, err := conn.Create(path, nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	cfg := identityConfig(t, testIdentity(), path, "a", slog.New(slog.DiscardHandler))
	a := startElector(t, cfg)
	require.Eventually(t, func() bool { return a.State() == leader.StateLeading }, 20*time.Second, 20*time.Millisecond)

	authed, _ := zkConnect(t, testIdentity(), nil)
	acl, _, err := authed.GetACL(path)
	require.NoError(t, err)
	require.Equal(t, zk.WorldACL(zk.PermAll), acl, "the elector leaves existing nodes to Check")

	require.NoError(t, leader.Tighten(context.Background(), authed, path, cfg.Credentials, slog.New(slog.DiscardHandler)))
	candidates, _, err := conn.Children(path)
	require.NoError(t, err)
	require.Len(t, candidates, 1)
	requireClosed(t, conn, path)
	requireUndeletable(t, conn, path+"/"+candidates[0])
	require.Never(t, func() bool { return a.State() != leader.StateLeading }, time.Second, 50*time.Millisecond)
}

// Rotating the password: while the tree's ACL names both the old and the
// new password's digest (operations.md, ZooKeeper), prefetchers with
// either pass the startup check, which leaves the ACL as it is, and one
// with the new password leads.
func TestCheckAcceptsAnACLNamingBothPasswords(t *testing.T) {
	conn, root := testinfra.ZooKeeper(t)
	path := root + "/election"
	both := append(zk.DigestACL(zk.PermAll, testinfra.ZooKeeperDigestUser, "old-password"),
		append(zk.DigestACL(zk.PermAll, testinfra.ZooKeeperDigestUser, testinfra.ZooKeeperDigestPassword), zk.WorldACL(zk.PermRead)...)...)
	_, err := conn.Create(path, nil, 0, both)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old := leader.Security{Username: testinfra.ZooKeeperDigestUser, Password: connsec.Password{Value: connsec.NewSecret("old-password")}}
	require.NoError(t, leader.Check(ctx, identityConfig(t, old, path, "old", slog.New(slog.DiscardHandler))))
	cfg := identityConfig(t, testIdentity(), path, "new", slog.New(slog.DiscardHandler))
	require.NoError(t, leader.Check(ctx, cfg))

	authed, _ := zkConnect(t, testIdentity(), nil)
	acl, _, err := authed.GetACL(path)
	require.NoError(t, err)
	require.ElementsMatch(t, both, acl, "the check left the rotation's ACL alone")

	e := startElector(t, cfg)
	require.Eventually(t, func() bool { return e.State() == leader.StateLeading }, 20*time.Second, 20*time.Millisecond)
}
