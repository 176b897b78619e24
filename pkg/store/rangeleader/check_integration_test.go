//go:build integration

package rangeleader_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"
	"github.com/sundialhq/sundial/testkit/logbuf"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// testIdentity is the digest identity testinfra's cleanup deletes with.
func testIdentity() rangeleader.Security {
	return rangeleader.Security{
		Username: testinfra.ZooKeeperDigestUser,
		Password: connsec.Password{Value: connsec.NewSecret(testinfra.ZooKeeperDigestPassword)},
	}
}

func identityConfig(t *testing.T, z rangeleader.Security, path, id string, log *slog.Logger) rangeleader.Config {
	t.Helper()
	cfg := rangeleader.Config{
		Servers: testinfra.ZooKeeperAddrs(t), Path: path, NodeID: id,
		Ranges: 1, Work: idle,
		SessionTimeout: 2 * time.Second,
		Logger:         log,
	}
	require.NoError(t, z.Apply(&cfg))
	return cfg
}

// idle is range work that only waits for its term to end.
func idle(ctx context.Context, _ rangeleader.Term) { <-ctx.Done() }

// leads reports whether c leads the only range of a one-range group: the
// single leader.
func leads(c *rangeleader.Coordinator) bool { return slices.Equal(c.Led(), []int{0}) }

// members is how many member nodes the group at path has, as conn sees
// them (0 when it cannot read them).
func members(conn *zk.Conn, path string) int {
	ms, _, err := conn.Children(path + "/members")
	if err != nil {
		return 0
	}
	return len(ms)
}

func startMember(t *testing.T, cfg rangeleader.Config) *rangeleader.Coordinator {
	t.Helper()
	e, err := rangeleader.New(cfg)
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

// With an identity, every node a single leader (one range) and its standby
// create — the parent made for the group's path, the path, members/, the
// member nodes, ranges/ and the range's lock — admits only that identity
// and lets the world read: a client without it, or with a wrong password,
// can neither add a member, delete the leader's lock, write nor change an
// ACL, and the standby still takes over when the leader stops.
func TestSingleLeaderNodesAdmitOnlyItsIdentity(t *testing.T) {
	_, root := testinfra.ZooKeeper(t)
	parent := root + "/elections"
	path := parent + "/prefetcher"
	a := startMember(t, identityConfig(t, testIdentity(), path, "a", slog.New(slog.DiscardHandler)))
	require.Eventually(t, func() bool { return leads(a) }, 20*time.Second, 20*time.Millisecond)
	authed, _ := zkConnect(t, testIdentity(), nil)
	b := startMember(t, identityConfig(t, testIdentity(), path, "b", slog.New(slog.DiscardHandler)))
	require.Eventually(t, func() bool { return members(authed, path) == 2 }, 20*time.Second, 20*time.Millisecond)
	require.Empty(t, b.Led(), "one range, one leader")

	ms, _, err := authed.Children(path + "/members")
	require.NoError(t, err)
	require.Len(t, ms, 2)
	lock := path + "/ranges/" + rangeleader.LockName(0)
	candidates := []string{"members/" + ms[0], "members/" + ms[1]}
	want := rangeleader.NodeACL([]rangeleader.Credential{{Scheme: "digest", Payload: []byte(testinfra.ZooKeeperDigestUser + ":" + testinfra.ZooKeeperDigestPassword)}})
	for _, n := range []string{parent, path, path + "/members", path + "/ranges", lock, path + "/" + candidates[0], path + "/" + candidates[1]} {
		acl, _, err := authed.GetACL(n)
		require.NoError(t, err)
		require.ElementsMatch(t, want, acl, n)
	}

	anonymous := testinfra.ZooKeeperConnect(t, 5*time.Second)
	wrong, _ := zkConnect(t, rangeleader.Security{Username: testinfra.ZooKeeperDigestUser, Password: connsec.Password{Value: connsec.NewSecret("not-it")}}, nil)
	for name, conn := range map[string]*zk.Conn{"anonymous": anonymous, "wrong password": wrong} {
		t.Run(name, func(t *testing.T) {
			for _, n := range []string{parent, path, path + "/members", path + "/ranges", path + "/" + candidates[0]} {
				requireClosed(t, conn, n)
			}
			for _, c := range candidates {
				requireUndeletable(t, conn, path+"/"+c)
			}
			requireUndeletable(t, conn, lock)
			requireUndeletable(t, conn, path)
		})
	}
	require.True(t, leads(a), "the leader kept its lock")

	a.Stop()
	require.Eventually(t, func() bool { return leads(b) }, 20*time.Second, 20*time.Millisecond,
		"the standby takes over on the closed path")
}

// A member with the wrong password cannot take over: it is refused at
// start (Check names the path), and a coordinator started anyway never
// gets a member node, while the right one keeps leading.
func TestWrongIdentityCannotTakeOver(t *testing.T) {
	_, root := testinfra.ZooKeeper(t)
	path := root + "/election"
	right := startMember(t, identityConfig(t, testIdentity(), path, "right", slog.New(slog.DiscardHandler)))
	require.Eventually(t, func() bool { return leads(right) }, 20*time.Second, 20*time.Millisecond)

	bad := rangeleader.Security{Username: testinfra.ZooKeeperDigestUser, Password: connsec.Password{Value: connsec.NewSecret("guessed")}}
	cfg := identityConfig(t, bad, path, "wrong", slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := rangeleader.Check(ctx, cfg)
	require.ErrorIs(t, err, connsec.ErrRefused)
	require.ErrorIs(t, err, rangeleader.ErrNotAdmitted)
	require.ErrorContains(t, err, path+": ")
	require.ErrorContains(t, err, "a wrong --zk-username or --zk-password?")

	// Nor does a member without any identity (open ACLs) pass Check.
	open := identityConfig(t, rangeleader.Security{}, path, "open", slog.New(slog.DiscardHandler))
	err = rangeleader.Check(ctx, open)
	require.ErrorIs(t, err, rangeleader.ErrNotAdmitted)
	require.ErrorContains(t, err, "give --zk-username and --zk-password-file")

	wrong := startMember(t, cfg)
	authed, _ := zkConnect(t, testIdentity(), nil)
	require.Never(t, func() bool {
		return len(wrong.Led()) > 0 || members(authed, path) != 1
	}, 3*time.Second, 50*time.Millisecond, "a member with a wrong password joined the group")
	require.True(t, leads(right))
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
	var logs logbuf.Buffer
	cfg := identityConfig(t, testIdentity(), path, "upgraded", slog.New(slog.NewTextHandler(&logs, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, rangeleader.Check(ctx, cfg))

	want := rangeleader.NodeACL(cfg.Credentials)
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
	require.NoError(t, rangeleader.Check(ctx, cfg))
	require.Equal(t, before, logs.String())

	// Another identity's tree, world-readable but closed to ours.
	other := root + "/other"
	_, err := conn.Create(other, nil, 0, append(zk.DigestACL(zk.PermAll, "someone-else", "pw"), zk.WorldACL(zk.PermRead)...))
	require.NoError(t, err)
	err = rangeleader.Check(ctx, identityConfig(t, testIdentity(), other, "refused", slog.New(slog.DiscardHandler)))
	require.ErrorIs(t, err, rangeleader.ErrNotAdmitted)
	require.ErrorIs(t, err, connsec.ErrRefused)
	require.ErrorContains(t, err, other+": ")
	require.ErrorContains(t, err, "setAcl -R")
}

// A coordinator with an identity, started on a tree left world-writable,
// tightens the nodes it creates but not the ones it found (Check does
// that); Tighten then closes the rest without disturbing the leader.
func TestTightenUnderARunningCoordinator(t *testing.T) {
	conn, root := testinfra.ZooKeeper(t)
	path := root + "/election"
	_, err := conn.Create(path, nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	cfg := identityConfig(t, testIdentity(), path, "a", slog.New(slog.DiscardHandler))
	a := startMember(t, cfg)
	require.Eventually(t, func() bool { return leads(a) }, 20*time.Second, 20*time.Millisecond)

	authed, _ := zkConnect(t, testIdentity(), nil)
	acl, _, err := authed.GetACL(path)
	require.NoError(t, err)
	require.Equal(t, zk.WorldACL(zk.PermAll), acl, "the coordinator leaves existing nodes to Check")

	require.NoError(t, rangeleader.Tighten(context.Background(), authed, path, cfg.Credentials, slog.New(slog.DiscardHandler)))
	ms, _, err := conn.Children(path + "/members")
	require.NoError(t, err)
	require.Len(t, ms, 1)
	requireClosed(t, conn, path)
	requireUndeletable(t, conn, path+"/members/"+ms[0])
	requireUndeletable(t, conn, path+"/ranges/"+rangeleader.LockName(0))
	require.Never(t, func() bool { return !leads(a) }, time.Second, 50*time.Millisecond)
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
	old := rangeleader.Security{Username: testinfra.ZooKeeperDigestUser, Password: connsec.Password{Value: connsec.NewSecret("old-password")}}
	require.NoError(t, rangeleader.Check(ctx, identityConfig(t, old, path, "old", slog.New(slog.DiscardHandler))))
	cfg := identityConfig(t, testIdentity(), path, "new", slog.New(slog.DiscardHandler))
	require.NoError(t, rangeleader.Check(ctx, cfg))

	authed, _ := zkConnect(t, testIdentity(), nil)
	acl, _, err := authed.GetACL(path)
	require.NoError(t, err)
	require.ElementsMatch(t, both, acl, "the check left the rotation's ACL alone")

	e := startMember(t, cfg)
	require.Eventually(t, func() bool { return leads(e) }, 20*time.Second, 20*time.Millisecond)
}
