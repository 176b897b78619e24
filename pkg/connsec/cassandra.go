package connsec

import (
	"flag"

	"github.com/gocql/gocql"

	"github.com/sundialhq/sundial/pkg/config"
	"github.com/sundialhq/sundial/pkg/ledger"
)

// Cassandra is how the services authenticate to Cassandra
// (PasswordAuthenticator) and whether they use TLS.
type Cassandra struct {
	Username string
	Password Password
	TLS      TLS
}

// Register adds the --cassandra-* security flags to fs.
func (c *Cassandra) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Username, "cassandra-username", c.Username, "Cassandra user (PasswordAuthenticator)")
	c.Password.register(fs, "cassandra-password", "Cassandra password")
	c.TLS.register(fs, "cassandra", "Cassandra")
}

// Validate records problems, each naming its flag.
func (c *Cassandra) Validate(p *config.Problems) {
	validateUser(p, "cassandra", "Cassandra", c.Username, c.Password, false)
	c.Password.validate(p, "cassandra-password")
	c.TLS.validate(p, "cassandra")
}

// Apply sets cc's TLS and authenticator.
func (c *Cassandra) Apply(cc *ledger.ConnectConfig) error {
	tc, err := c.TLS.Config()
	if err != nil {
		return err
	}
	cc.TLS = tc
	switch {
	case c.Username == "":
	case c.Password.File != "":
		cc.Authenticator = passwordFileAuthenticator{user: c.Username, pw: c.Password}
	default:
		cc.Authenticator = gocql.PasswordAuthenticator{Username: c.Username, Password: c.Password.Value.Reveal()}
	}
	return nil
}

// passwordFileAuthenticator is gocql.PasswordAuthenticator with the password
// read from its file at each challenge: each new connection of the pool
// authenticates with the file's current content.
type passwordFileAuthenticator struct {
	user string
	pw   Password
}

func (a passwordFileAuthenticator) Challenge(req []byte) ([]byte, gocql.Authenticator, error) {
	s, err := a.pw.Read()
	if err != nil {
		return nil, nil, err
	}
	return gocql.PasswordAuthenticator{Username: a.user, Password: s}.Challenge(req)
}

func (passwordFileAuthenticator) Success([]byte) error { return nil }
