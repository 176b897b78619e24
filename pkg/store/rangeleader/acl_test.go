package rangeleader

import (
	"testing"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
)

func TestNodeACL(t *testing.T) {
	require.Equal(t, zk.WorldACL(zk.PermAll), NodeACL(nil), "no identity: open")
	require.Equal(t, zk.WorldACL(zk.PermAll), NodeACL([]Credential{{Scheme: "ip", Payload: []byte("127.0.0.1")}}), "only digest is an identity")

	acl := NodeACL([]Credential{{Scheme: "digest", Payload: []byte("sundial:pa:ss")}})
	want := append(zk.DigestACL(zk.PermAll, "sundial", "pa:ss"), zk.WorldACL(zk.PermRead)...)
	require.Equal(t, want, acl, "split at the first colon, as the server does")
	require.False(t, worldWritable(acl))
	require.True(t, admits(acl, acl))
	require.False(t, admits(acl, NodeACL([]Credential{{Scheme: "digest", Payload: []byte("sundial:other")}})))
	// cdrw without ADMIN is not enough: the identity could not see its own
	// digest in the ACL, nor tighten what it creates below.
	partial := append(zk.DigestACL(zk.PermAll&^zk.PermAdmin, "sundial", "pa:ss"), zk.WorldACL(zk.PermRead)...)
	require.False(t, admits(partial, acl))
	require.True(t, worldWritable(zk.WorldACL(zk.PermRead|zk.PermCreate)))
}

func TestConfigRefusesADigestWithoutAPassword(t *testing.T) {
	cfg := Config{Servers: []string{"127.0.0.1:2181"}, Path: "/e", NodeID: "n",
		Credentials: []Credential{{Scheme: "digest", Payload: []byte("sundial")}}}
	cfg.setDefaults()
	require.ErrorContains(t, cfg.Validate(), "credentials[0]: a digest payload is user:password")
}
