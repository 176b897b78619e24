package lease

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/connsec"
)

// Security is how a service authenticates to Redis and whether it uses
// TLS: the --redis-username, --redis-password[-file] and --redis-tls*
// flags, applied to the client a Store is built on. It lives with the
// leases, the services' one use of Redis, so that only the services that
// take leases link go-redis; connsec has the TLS and password pieces every
// component's settings share.
type Security struct {
	// Username is the ACL user (Redis 6+); empty with a password means the
	// default user (a plain AUTH password).
	Username string
	Password connsec.Password
	TLS      connsec.TLS
}

// Register adds the --redis-* security flags to fs.
func (r *Security) Register(fs *flag.FlagSet) {
	fs.StringVar(&r.Username, "redis-username", r.Username, "Redis ACL user (empty: the default user, when --redis-password is set)")
	r.Password.Register(fs, "redis-password", "Redis password")
	r.TLS.Register(fs, "redis", "Redis")
}

// Validate records problems, each naming its flag.
func (r *Security) Validate(p *config.Problems) {
	// A password alone is Redis's default user (AUTH password).
	connsec.ValidateUser(p, "redis", "Redis", r.Username, r.Password, true)
	r.Password.Validate(p, "redis-password")
	r.TLS.Validate(p, "redis")
}

// Apply sets o's credentials and TLS. A password file is read for every new
// connection, so a rotated password needs no restart.
func (r *Security) Apply(o *redis.Options) error {
	tc, err := r.TLS.Config()
	if err != nil {
		return err
	}
	o.TLSConfig = tc
	switch {
	case r.Password.File != "":
		user, pw := r.Username, r.Password
		o.CredentialsProviderContext = func(context.Context) (string, string, error) {
			s, err := pw.Read()
			return user, s, err
		}
	case !r.Password.IsZero():
		o.Username, o.Password = r.Username, r.Password.Value.Reveal()
	}
	return nil
}

// isAuthError reports whether err is Redis refusing the credentials or
// the user's rights.
func isAuthError(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "NOPERM")
}

// Check is a service's startup check of its Redis client: one connection
// dialed once (no retries, so a TLS handshake nobody answers fails within
// the dial timeout instead of after every retry), then one PING, all bounded
// by ctx. The error names Redis and the address, so the operator reading why
// a service stopped knows which component refused it (WRONGPASS for a wrong
// password, "certificate signed by unknown authority" for a server its CA
// bundle does not cover); those refusals are marked connsec.ErrRefused.
//
// On a Redis Cluster client every node the cluster names is dialed and
// pinged the same way.
func Check(ctx context.Context, rdb redis.UniversalClient) error {
	switch c := rdb.(type) {
	case *redis.Client:
		return checkNode(ctx, c)
	case *redis.ClusterClient:
		if err := c.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error { return checkNode(ctx, node) }); err != nil {
			return fmt.Errorf("redis cluster at %s: %w", strings.Join(c.Options().Addrs, ","), err)
		}
		return nil
	default:
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		return nil
	}
}

func checkNode(ctx context.Context, rdb *redis.Client) error {
	o := rdb.Options()
	fail := func(err error) error {
		if connsec.IsTLSRefusal(err) || isAuthError(err) {
			err = connsec.Refused(err)
		}
		var ne net.Error
		if o.TLSConfig != nil && errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("redis at %s: %w (no answer to the TLS handshake: is it Redis's tls-port?)", o.Addr, err)
		}
		if o.TLSConfig == nil && errors.Is(err, io.EOF) {
			return fmt.Errorf("redis at %s: %w (the server hung up: a TLS port, without --redis-tls?)", o.Addr, err)
		}
		return fmt.Errorf("redis at %s: %w", o.Addr, err)
	}
	if o.Dialer != nil {
		c, err := o.Dialer(ctx, o.Network, o.Addr)
		if err != nil {
			return fail(err)
		}
		_ = c.Close()
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fail(err)
	}
	return nil
}
