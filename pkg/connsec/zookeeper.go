package connsec

import (
	"context"
	"crypto/tls"
	"flag"
	"net"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/sundialhq/sundial/pkg/config"
	"github.com/sundialhq/sundial/pkg/leader"
)

// ZooKeeper is how the prefetcher authenticates to ZooKeeper (the digest
// scheme) and whether it uses TLS (the server's secureClientPort).
type ZooKeeper struct {
	Username string
	Password Password
	TLS      TLS
}

// Register adds the --zk-* security flags to fs.
func (z *ZooKeeper) Register(fs *flag.FlagSet) {
	fs.StringVar(&z.Username, "zk-username", z.Username, "ZooKeeper digest user, added to the session so ACLs that name it admit the prefetcher")
	z.Password.register(fs, "zk-password", "ZooKeeper digest password")
	z.TLS.register(fs, "zk", "ZooKeeper")
}

// Validate records problems, each naming its flag.
func (z *ZooKeeper) Validate(p *config.Problems) {
	validateUser(p, "zk", "ZooKeeper", z.Username, z.Password, false)
	if strings.Contains(z.Username, ":") {
		// digest splits "user:password" at the first colon.
		p.Addf("zk-username", "must not contain ':'")
	}
	z.Password.validate(p, "zk-password")
	z.TLS.validate(p, "zk")
}

// Digest is the payload of AddAuth("digest", ...), "user:password", or nil
// without credentials. The password is read now: ZooKeeper gets it once per
// client, which replays it on every reconnection.
func (z *ZooKeeper) Digest() ([]byte, error) {
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
func (z *ZooKeeper) Dialer(base zk.Dialer) (zk.Dialer, error) {
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
func (z *ZooKeeper) Apply(cfg *leader.Config) error {
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
		cfg.Credentials = append(cfg.Credentials, leader.Credential{Scheme: "digest", Payload: digest})
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
