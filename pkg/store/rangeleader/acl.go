package rangeleader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"
)

// Credential is one AddAuth: a scheme ("digest") and its payload
// ("user:password" for digest). Payload is secret; it is never logged.
type Credential struct {
	Scheme  string
	Payload []byte
}

// NodeACL is the ACL of every node the coordinator creates (the group's
// path and the parents it creates for it, members/, ranges/, member nodes
// and range locks). With a digest credential, that identity may do
// everything and the world may only read: nobody else can add a fake
// member, delete a lock (deleting a child takes the DELETE permission on
// its parent), overwrite a node or change its ACL, while an operator's
// zkCli still shows who leads. Without one, every node is
// world:anyone:cdrwa.
func NodeACL(creds []Credential) []zk.ACL {
	var acl []zk.ACL
	for _, c := range creds {
		if user, password, ok := digestUser(c); ok {
			acl = append(acl, zk.DigestACL(zk.PermAll, user, password)...)
		}
	}
	if len(acl) == 0 {
		return zk.WorldACL(zk.PermAll)
	}
	return append(acl, zk.WorldACL(zk.PermRead)...)
}

// digestUser splits a digest credential's "user:password" at the first
// colon, as the server does.
func digestUser(c Credential) (user, password string, ok bool) {
	if c.Scheme != "digest" {
		return "", "", false
	}
	return strings.Cut(string(c.Payload), ":")
}

// worldWritable reports whether acl lets any client do more than read.
func worldWritable(acl []zk.ACL) bool {
	for _, a := range acl {
		if a.Scheme == "world" && a.ID == "anyone" && a.Perms&^zk.PermRead != 0 {
			return true
		}
	}
	return false
}

// admits reports whether acl grants every permission the engines use to an
// identity whose entries (NodeACL's, without the world's) are in ours.
func admits(acl, ours []zk.ACL) bool {
	for _, o := range ours {
		if o.Scheme == "world" {
			continue
		}
		i := slices.IndexFunc(acl, func(a zk.ACL) bool { return a.Scheme == o.Scheme && a.ID == o.ID })
		if i >= 0 && acl[i].Perms&zk.PermAll == zk.PermAll {
			return true
		}
	}
	return false
}

// notAdmittedFix and setACLHint are the fixes a refusal to start names.
const (
	setACLHint = "setAcl -R <path> digest:<user>:<base64 sha1 of user:password>:cdrwa,world:anyone:r"

	notAdmittedFix = "its ACL admits another identity only: a wrong --zk-username or --zk-password? " +
		"If the tree is another identity's, delete it so the prefetcher creates it again, or give it this identity's ACL " +
		"with zkCli as that identity or the super user: " + setACLHint
)

// ErrNotAdmitted marks a node on the group's path whose ACL neither is
// world-writable (so Tighten could set it) nor admits the configured
// identity: the coordinator could not create or delete below it.
var ErrNotAdmitted = errors.New("rangeleader: zookeeper ACL does not admit this identity")

// Tighten walks root and every node below it, as conn (with creds added)
// sees them, and gives each world-writable node the ACL NodeACL(creds) —
// what a tree created before the coordinator set ACLs, or by a prefetcher
// without credentials, looks like. Each change is a SetACL at the ACL
// version just read, so a concurrent change is read again rather than
// overwritten, and is logged with its path. A node whose ACL is not
// world-writable must admit the identity; otherwise, or when the server
// refuses the change, the error names the node and how to fix it (wrapping
// ErrNotAdmitted, or zk.ErrNoAuth). A missing root is fine: the coordinator
// creates it. Without a digest credential Tighten does nothing.
func Tighten(ctx context.Context, conn *zk.Conn, root string, creds []Credential, log *slog.Logger) error {
	want := NodeACL(creds)
	if worldWritable(want) {
		return nil
	}
	return tighten(ctx, conn, root, want, log)
}

func tighten(ctx context.Context, conn *zk.Conn, p string, want []zk.ACL, log *slog.Logger) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for {
		acl, st, err := conn.GetACL(p)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return nil // an ephemeral that left meanwhile, or no tree yet
		case errors.Is(err, zk.ErrNoAuth):
			return fmt.Errorf("%s: %w (%s)", p, ErrNotAdmitted, notAdmittedFix)
		case err != nil:
			return fmt.Errorf("%s: read ACL: %w", p, err)
		}
		if !worldWritable(acl) {
			if !admits(acl, want) {
				return fmt.Errorf("%s: %w (%s)", p, ErrNotAdmitted, notAdmittedFix)
			}
			break
		}
		_, err = conn.SetACL(p, want, st.Aversion)
		switch {
		case errors.Is(err, zk.ErrBadVersion):
			continue // changed since we read it: look again
		case errors.Is(err, zk.ErrNoNode):
			return nil
		case errors.Is(err, zk.ErrNoAuth):
			return fmt.Errorf("%s: world-writable, but its ACL does not let anyone change it: %w (set it with zkCli as the super user: %s)", p, err, setACLHint)
		case err != nil:
			return fmt.Errorf("%s: set ACL: %w", p, err)
		}
		log.Warn("zookeeper node was world-writable; ACL tightened to the prefetcher's identity", "path", p)
		break
	}
	children, _, err := conn.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: list children: %w", p, err)
	}
	for _, c := range children {
		if err := tighten(ctx, conn, path.Join(p, c), want, log); err != nil {
			return err
		}
	}
	return nil
}
