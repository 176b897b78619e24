package ledger

import (
	"flag"

	"github.com/gocql/gocql"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/connsec"
)

// Security is how a service authenticates to Cassandra
// (PasswordAuthenticator) and whether it uses TLS: the --cassandra-username,
// --cassandra-password[-file] and --cassandra-tls* flags. It lives with the
// ledger, the one Cassandra client, so that only the services that read or
// write the ledger link gocql; connsec has the TLS and password pieces every
// component's settings share.
type Security struct {
	Username string
	Password connsec.Password
	TLS      connsec.TLS
}

// Register adds the --cassandra-* security flags to fs.
func (c *Security) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Username, "cassandra-username", c.Username, "Cassandra user (PasswordAuthenticator)")
	c.Password.Register(fs, "cassandra-password", "Cassandra password")
	c.TLS.Register(fs, "cassandra", "Cassandra")
}

// Validate records problems, each naming its flag.
func (c *Security) Validate(p *config.Problems) {
	connsec.ValidateUser(p, "cassandra", "Cassandra", c.Username, c.Password, false)
	c.Password.Validate(p, "cassandra-password")
	c.TLS.Validate(p, "cassandra")
}

// Apply sets cc's TLS and authenticator.
func (c *Security) Apply(cc *ConnectConfig) error {
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
	pw   connsec.Password
}

func (a passwordFileAuthenticator) Challenge(req []byte) ([]byte, gocql.Authenticator, error) {
	s, err := a.pw.Read()
	if err != nil {
		return nil, nil, err
	}
	return gocql.PasswordAuthenticator{Username: a.user, Password: s}.Challenge(req)
}

func (passwordFileAuthenticator) Success([]byte) error { return nil }
