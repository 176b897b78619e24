package rangeleader

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/connsec"
)

// Security is how the prefetcher authenticates to ZooKeeper (the digest
// scheme) and whether it uses TLS (the server's secureClientPort): the
// --zk-username, --zk-password[-file] and --zk-tls* flags. It lives with
// the coordinator, the one ZooKeeper client, so that only the prefetcher
// links go-zookeeper; connsec has the TLS and password pieces every component's
// settings share.
type Security struct {
	Username string
	Password connsec.Password
	TLS      connsec.TLS
}

// Register adds the --zk-* security flags to fs.
func (z *Security) Register(fs *flag.FlagSet) {
	fs.StringVar(&z.Username, "zk-username", z.Username, "ZooKeeper digest user, added to the session so ACLs that name it admit the prefetcher")
	z.Password.Register(fs, "zk-password", "ZooKeeper digest password")
	z.TLS.Register(fs, "zk", "ZooKeeper")
}

// Validate records problems, each naming its flag.
func (z *Security) Validate(p *config.Problems) {
	connsec.ValidateUser(p, "zk", "ZooKeeper", z.Username, z.Password, false)
	if strings.Contains(z.Username, ":") {
		// digest splits "user:password" at the first colon.
		p.Addf("zk-username", "must not contain ':'")
	}
	z.Password.Validate(p, "zk-password")
	z.TLS.Validate(p, "zk")
}

// Digest is the payload of AddAuth("digest", ...), "user:password", or nil
// without credentials. The password is read now: ZooKeeper gets it once per
// client, which replays it on every reconnection.
func (z *Security) Digest() ([]byte, error) {
	if z.Username == "" {
		return nil, nil
	}
	s, err := z.Password.Read()
	if err != nil {
		return nil, err
	}
	return []byte(z.Username + ":" + s), nil
}

// Dialer returns base (net.DialTimeout when nil) wrapped in TLS when TLS is
// on. Pass it to zk.WithDialer.
func (z *Security) Dialer(base zk.Dialer) (zk.Dialer, error) {
	if base == nil {
		base = net.DialTimeout
	}
	tc, err := z.TLS.Config()
	if err != nil || tc == nil {
		return base, err
	}
	return tlsDialer(base, tc), nil
}

// Apply sets cfg's dialer (over cfg.Dialer, if a test set one) and
// credentials.
func (z *Security) Apply(cfg *Config) error {
	d, err := z.Dialer(cfg.Dialer)
	if err != nil {
		return err
	}
	cfg.Dialer = d
	digest, err := z.Digest()
	if err != nil {
		return err
	}
	if digest != nil {
		cfg.Credentials = append(cfg.Credentials, Credential{Scheme: "digest", Payload: digest})
	}
	return nil
}

// tlsDialer dials with base, then completes a TLS handshake within the
// same timeout (the ZooKeeper client allows one second per server).
func tlsDialer(base zk.Dialer, tc *tls.Config) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		raw, err := base(network, address, timeout)
		if err != nil {
			return nil, err
		}
		cfg := tc
		if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				host = address
			}
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		conn := tls.Client(raw, cfg)
		if err := conn.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		return conn, nil
	}
}

// Check is the prefetcher's startup check of its ZooKeeper settings, bounded
// by ctx (and, per server, by the dial timeout): a connection through
// cfg.Dialer to one of cfg.Servers (so an untrusted certificate is an error
// now, where the client would retry it forever in the background), a
// session with cfg.Credentials added, and, when cfg.Path exists, its ACL:
// with a digest credential, Tighten gives every world-writable node of the
// tree the identity's ACL (NodeACL) and refuses a node that admits another
// identity only (a wrong digest password: ZooKeeper accepts any digest and
// checks it only against ACLs); without one, a path closed to the world is
// refused. Either refusal is an error now, where the coordinator would
// never join the group. Its error names ZooKeeper, the servers and the node;
// those refusals are marked connsec.ErrRefused.
func Check(ctx context.Context, cfg Config) error {
	servers := strings.Join(cfg.Servers, ",")
	fail := func(format string, args ...any) error {
		return fmt.Errorf("zookeeper at %s: "+format, append([]any{servers}, args...)...)
	}
	dial := cfg.Dialer
	if dial == nil {
		dial = net.DialTimeout
	}
	timeout := checkDialTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = max(time.Until(d), time.Millisecond)
	}
	var dialErrs []error
	for _, s := range cfg.Servers {
		c, err := dial("tcp", s, timeout)
		if err == nil {
			_ = c.Close()
			dialErrs = nil
			break
		}
		dialErrs = append(dialErrs, err)
	}
	if len(dialErrs) > 0 {
		err := errors.Join(dialErrs...)
		if connsec.IsTLSRefusal(err) {
			err = connsec.Refused(err)
		}
		return fail("%w", err)
	}
	sessionTimeout := cfg.SessionTimeout
	if sessionTimeout == 0 {
		sessionTimeout = 4 * time.Second
	}
	conn, events, err := zk.Connect(cfg.Servers, sessionTimeout, zk.WithDialer(dial), zk.WithLogger(discardZKLog{}))
	if err != nil {
		return fail("%w", err)
	}
	defer func() {
		conn.Close()
		for range events { // closed once the client's goroutines end
		}
	}()
	// A session takes one round trip once connected; a server that never
	// answers (a plaintext client on the TLS port) is not waited for longer
	// than a dial.
	wait := time.NewTimer(checkDialTimeout)
	defer wait.Stop()
	for connected := false; !connected; {
		select {
		case ev := <-events:
			connected = ev.State == zk.StateHasSession
			if ev.State == zk.StateAuthFailed {
				return fail("%w", connsec.Refused(errors.New("authentication failed")))
			}
		case <-wait.C:
			return fail("no session within %v (a TLS port without --zk-tls?)", checkDialTimeout)
		case <-ctx.Done():
			return fail("no session: %w", ctx.Err())
		}
	}
	for _, c := range cfg.Credentials {
		if err := conn.AddAuth(c.Scheme, c.Payload); err != nil {
			return fail("add %s credentials: %w", c.Scheme, err)
		}
	}
	if cfg.Path == "" {
		return nil
	}
	acl, _, err := conn.GetACL(cfg.Path)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		// The coordinator creates it, with NodeACL(cfg.Credentials).
		return nil
	case errors.Is(err, zk.ErrNoAuth):
		return fail("%s: %w (its ACL does not admit these credentials: a wrong --zk-username or --zk-password?)", cfg.Path, connsec.Refused(err))
	case err != nil:
		return fail("%s: %w", cfg.Path, err)
	}
	if worldWritable(NodeACL(cfg.Credentials)) {
		// No identity: the engines need the world to create and delete.
		if !worldCanCreateAndDelete(acl) {
			return fail("%s: %w (its ACL admits only named identities: give --zk-username and --zk-password-file)",
				cfg.Path, connsec.Refused(ErrNotAdmitted))
		}
		return nil
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := Tighten(ctx, conn, cfg.Path, cfg.Credentials, log); err != nil {
		if errors.Is(err, ErrNotAdmitted) || errors.Is(err, zk.ErrNoAuth) {
			return fail("%w", connsec.Refused(err)) // the error names the node and the fix
		}
		return fail("%w", err)
	}
	return nil
}

// worldCanCreateAndDelete reports whether a client without credentials can
// add and remove children of a node with this ACL.
func worldCanCreateAndDelete(acl []zk.ACL) bool {
	const need = zk.PermCreate | zk.PermDelete
	for _, a := range acl {
		if a.Scheme == "world" && a.ID == "anyone" && a.Perms&need == need {
			return true
		}
	}
	return false
}

// checkDialTimeout bounds each of Check's dials (TCP and TLS handshake).
const checkDialTimeout = 5 * time.Second

type discardZKLog struct{}

func (discardZKLog) Printf(string, ...any) {}
