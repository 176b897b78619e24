package connsec

import (
	"context"
	"flag"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/config"
)

// Redis is how the services authenticate to Redis and whether they use TLS.
type Redis struct {
	// Username is the ACL user (Redis 6+); empty with a password means the
	// default user (a plain AUTH password).
	Username string
	Password Password
	TLS      TLS
}

// Register adds the --redis-* security flags to fs.
func (r *Redis) Register(fs *flag.FlagSet) {
	fs.StringVar(&r.Username, "redis-username", r.Username, "Redis ACL user (empty: the default user, when --redis-password is set)")
	r.Password.register(fs, "redis-password", "Redis password")
	r.TLS.register(fs, "redis", "Redis")
}

// Validate records problems, each naming its flag.
func (r *Redis) Validate(p *config.Problems) {
	// A password alone is Redis's default user (AUTH password).
	validateUser(p, "redis", "Redis", r.Username, r.Password, true)
	r.Password.validate(p, "redis-password")
	r.TLS.validate(p, "redis")
}

// Apply sets o's credentials and TLS. A password file is read for every new
// connection, so a rotated password needs no restart.
func (r *Redis) Apply(o *redis.Options) error {
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
