package lease

import (
	"context"
	"flag"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/config"
	"github.com/sundialhq/sundial/pkg/connsec"
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
