package ledger

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/gocql/gocql"
)

// Session is the slice of a Cassandra session the ledger uses. It is small on
// purpose: the gocql adapter (Wrap) is the only real implementation, the
// retry and metrics decorators wrap any Session, and a test fault is a struct
// that embeds a Session and overrides one method.
type Session interface {
	// Exec runs one statement that returns no rows (DDL, single writes).
	Exec(ctx context.Context, stmt Statement) error
	// ExecBatch runs b's statements as one batch.
	ExecBatch(ctx context.Context, b Batch) error
	// Iter runs a query. Every row is fetched (the driver pages behind the
	// iterator); callers bound result sets with LIMIT. The query's error is
	// reported by Iter.Close.
	Iter(ctx context.Context, stmt Statement) Iter
	// AwaitSchemaAgreement waits until the nodes agree on the schema after DDL.
	AwaitSchemaAgreement(ctx context.Context) error
	// Close releases the session's connections.
	Close()
}

// Statement is one CQL statement and its bound values.
type Statement struct {
	CQL    string
	Values []any
	// Idempotent marks a statement the driver and the retry decorator may
	// run again after a timeout without changing the outcome.
	Idempotent bool
}

// Batch is a group of statements run as one CQL batch.
type Batch struct {
	// Logged batches go through the batch log, so either every statement is
	// eventually applied or none is, even if the coordinator dies midway.
	Logged bool
	// Timestamp is the write timestamp of every statement, in microseconds
	// since the epoch; zero lets the driver choose (client time).
	Timestamp  int64
	Statements []Statement
	Idempotent bool
}

// Iter walks a query's rows.
type Iter interface {
	// Scan copies the next row's columns into dest; false when no row is
	// left or on error (see Close).
	Scan(dest ...any) bool
	// Close releases the iterator and reports the query's error.
	Close() error
}

// ConnectConfig is how Connect reaches Cassandra.
type ConnectConfig struct {
	// Hosts are contact points, host or host:port.
	Hosts []string
	// LocalDC, when set, keeps requests in one datacenter (token-aware within
	// it); empty means every host is local, which is right for one DC.
	LocalDC string
	// Consistency of every read and write; LOCAL_QUORUM by default, so a
	// write acknowledged to the worker is seen by the api's next read even
	// after a node restart.
	Consistency gocql.Consistency
	// Timeout bounds each request on the client; 5 s by default, above the
	// server's own write timeout (2 s) so the server's verdict comes first.
	Timeout time.Duration
	// ConnectTimeout bounds dialing each host; 5 s by default.
	ConnectTimeout time.Duration
	// TLS, when set, wraps every connection. Host names are verified unless
	// TLS.InsecureSkipVerify: against TLS.ServerName, or else against the
	// address dialed — an IP for every node found through the ring, so the
	// nodes' certificates need IP SANs unless ServerName is set.
	TLS *tls.Config
	// Authenticator answers the server's authentication challenge
	// (gocql.PasswordAuthenticator or one of the same shape); nil: none.
	Authenticator gocql.Authenticator
}

// Connect opens a gocql session with the settings the ledger expects and
// returns it behind the Session seam. The session is not bound to a keyspace:
// statements name their keyspace, so the same session can run Migrate before
// the keyspace exists.
func Connect(cfg ConnectConfig) (Session, error) {
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("ledger: connect: no Cassandra hosts")
	}
	c := gocql.NewCluster(cfg.Hosts...)
	// gocql v1.x speaks protocol v4 at most; Cassandra 5 negotiates down to
	// it. Pinning it skips the discovery round trip and keeps the behaviour
	// (unset values, client timestamps) the same on every node.
	c.ProtoVersion = 4
	c.Consistency = gocql.LocalQuorum
	if cfg.Consistency != 0 {
		c.Consistency = cfg.Consistency
	}
	c.Timeout = 5 * time.Second
	if cfg.Timeout > 0 {
		c.Timeout = cfg.Timeout
	}
	c.ConnectTimeout = 5 * time.Second
	if cfg.ConnectTimeout > 0 {
		c.ConnectTimeout = cfg.ConnectTimeout
	}
	// Token-aware routing sends each write to a replica of its partition,
	// saving the coordinator hop; the fallback policy decides among replicas.
	fallback := gocql.RoundRobinHostPolicy()
	if cfg.LocalDC != "" {
		fallback = gocql.DCAwareRoundRobinPolicy(cfg.LocalDC)
	}
	c.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(fallback)
	if cfg.TLS != nil {
		// With a Config given, gocql verifies host names unless the Config
		// itself skips verification (EnableHostVerification only ever turns
		// verification on).
		c.SslOpts = &gocql.SslOptions{Config: cfg.TLS}
	}
	c.Authenticator = cfg.Authenticator
	// Retries live in the Retrying decorator, where they are counted and
	// bounded by the caller's context; the driver's own policy stays off so
	// the two do not multiply.
	c.RetryPolicy = nil
	s, err := c.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("ledger: connect to cassandra at %v: %w", cfg.Hosts, err)
	}
	return Wrap(s), nil
}

// Wrap puts a gocql session behind the Session seam.
func Wrap(s *gocql.Session) Session { return gocqlSession{s} }

type gocqlSession struct{ s *gocql.Session }

func (g gocqlSession) Exec(ctx context.Context, st Statement) error {
	return g.s.Query(st.CQL, st.Values...).WithContext(ctx).Idempotent(st.Idempotent).Exec()
}

func (g gocqlSession) ExecBatch(ctx context.Context, b Batch) error {
	typ := gocql.UnloggedBatch
	if b.Logged {
		typ = gocql.LoggedBatch
	}
	gb := g.s.NewBatch(typ).WithContext(ctx)
	for _, st := range b.Statements {
		gb.Entries = append(gb.Entries, gocql.BatchEntry{Stmt: st.CQL, Args: st.Values, Idempotent: b.Idempotent})
	}
	if b.Timestamp != 0 {
		gb.WithTimestamp(b.Timestamp)
	}
	return g.s.ExecuteBatch(gb)
}

func (g gocqlSession) Iter(ctx context.Context, st Statement) Iter {
	return g.s.Query(st.CQL, st.Values...).WithContext(ctx).Idempotent(true).Iter()
}

func (g gocqlSession) AwaitSchemaAgreement(ctx context.Context) error {
	return g.s.AwaitSchemaAgreement(ctx)
}

func (g gocqlSession) Close() { g.s.Close() }
