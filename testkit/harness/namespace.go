package harness

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/gocql/gocql"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ElectionRoot is the znode under which namespaces put their election paths.
const ElectionRoot = "/sundial-harness"

// Namespace is one deployment's isolated slice of the shared components.
// Every service of a Platform gets these settings, so two deployments (two
// tests, or a benchmark beside the tests) never see each other's jobs,
// firings, leases, ledger rows or leader.
type Namespace struct {
	Name         string // the base of every name below
	Schema       string // Postgres schema, selected through PostgresDSN's search_path
	PostgresDSN  string
	TopicPrefix  string // <prefix>.fire.<priority>, <prefix>.dlq
	Group        string // the workers' consumer group
	RedisPrefix  string
	Keyspace     string // Cassandra keyspace of the ledger (the api creates it)
	ElectionPath string // ZooKeeper path of the prefetchers' election
	// SigningKEK seals the tenants' signing keys (the api's and workers'
	// --signing-key-encryption-key-file): Platform gives it to them, and
	// Sink verifies with the keys it opens.
	SigningKEK []byte

	infra Infra
}

// NewNamespace creates a namespace named after base (plus random digits): it
// creates the Postgres schema; the services create everything else they
// need on first use. Drop removes it all.
func NewNamespace(ctx context.Context, infra Infra, base string) (*Namespace, error) {
	name, err := UniqueName(base, 48) // Cassandra's limit for keyspace names
	if err != nil {
		return nil, err
	}
	kek, err := NewKEK()
	if err != nil {
		return nil, err
	}
	n := named(infra, name)
	n.SigningKEK = kek
	conn, err := pgx.Connect(ctx, infra.PostgresDSN)
	if err != nil {
		return nil, fmt.Errorf("harness: connect to Postgres: %w (is `make infra-up` done?)", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("harness: create schema %s: %w", name, err)
	}
	return n, nil
}

// OpenNamespace names an existing namespace of infra by its name (a
// namespace a run left behind), to drop it. It checks nothing exists.
func OpenNamespace(infra Infra, name string) (*Namespace, error) {
	if name == "" || strings.ContainsAny(name, " /:{}") {
		return nil, fmt.Errorf("harness: %q is not a namespace name", name)
	}
	return named(infra, name), nil
}

// named is the namespace called name in infra: every component's name in
// it derives from name.
func named(infra Infra, name string) *Namespace {
	return &Namespace{
		Name:         name,
		Schema:       name,
		PostgresDSN:  WithSearchPath(infra.PostgresDSN, name),
		TopicPrefix:  name,
		Group:        name,
		RedisPrefix:  name + ":",
		Keyspace:     name,
		ElectionPath: path.Join(ElectionRoot, name),
		infra:        infra,
	}
}

// WithSearchPath returns dsn with its search_path set to schema through the
// `options` parameter (-c search_path=schema), replacing any options it had,
// so the DSN selects the schema for pgx, psql and child processes alike.
func WithSearchPath(dsn, schema string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set("options", "-c search_path="+schema)
	// Encode writes a space as '+', which libpq and pgx both take literally in
	// a URI; every '+' Encode writes is a space ('+' itself becomes %2B).
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

// Drop removes everything of the namespace from every component: the
// schema, the keyspace, the topics under the prefix and the group, the Redis
// keys under the prefix and the election subtree. Stop the services first.
// It tries every component and returns the errors joined.
func (n *Namespace) Drop(ctx context.Context) error {
	return errors.Join(n.dropPostgres(ctx), n.dropCassandra(ctx), n.dropKafka(ctx), n.dropRedis(ctx), n.dropZooKeeper())
}

func (n *Namespace) dropPostgres(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, n.infra.PostgresDSN)
	if err != nil {
		return fmt.Errorf("harness: schema %s left behind: %w", n.Schema, err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	// A connection still open in the schema could hold a lock forever; give
	// up after a while rather than hang.
	if _, err := conn.Exec(ctx, "SET lock_timeout = '30s'"); err != nil {
		return fmt.Errorf("harness: schema %s left behind: %w", n.Schema, err)
	}
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{n.Schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("harness: schema %s left behind: %w", n.Schema, err)
	}
	return nil
}

// CassandraCluster is a gocql configuration for the infrastructure's
// Cassandra: protocol v4 (what gocql v1.x speaks to Cassandra 5.0),
// consistency ONE, and timeouts generous enough for schema changes on a busy
// 2-core machine.
func (i Infra) CassandraCluster() *gocql.ClusterConfig {
	c := gocql.NewCluster(i.CassandraHosts...)
	c.ProtoVersion = 4
	c.Consistency = gocql.One
	c.ConnectTimeout = 10 * time.Second
	c.Timeout = 30 * time.Second
	c.NumConns = 1
	// One local node: do not wait for schema agreement among peers that do not exist.
	c.MaxWaitSchemaAgreement = 30 * time.Second
	return c
}

func (n *Namespace) dropCassandra(ctx context.Context) error {
	s, err := n.infra.CassandraCluster().CreateSession()
	if err != nil {
		return fmt.Errorf("harness: keyspace %s left behind: %w", n.Keyspace, err)
	}
	defer s.Close()
	if err := s.Query(`DROP KEYSPACE IF EXISTS ` + n.Keyspace).WithContext(ctx).Exec(); err != nil {
		return fmt.Errorf("harness: keyspace %s left behind: %w", n.Keyspace, err)
	}
	return nil
}

func (n *Namespace) dropKafka(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.infra.KafkaBrokers...))
	if err != nil {
		return fmt.Errorf("harness: topics %s.* left behind: %w", n.TopicPrefix, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("harness: topics %s.* left behind: %w", n.TopicPrefix, err)
	}
	var mine []string
	for _, t := range topics.Names() {
		if strings.HasPrefix(t, n.TopicPrefix+".") {
			mine = append(mine, t)
		}
	}
	var errs []error
	if len(mine) > 0 {
		resp, err := adm.DeleteTopics(ctx, mine...)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("harness: topics %s.* left behind: %w", n.TopicPrefix, err))
		}
	}
	if err := n.dropGroup(ctx, adm); err != nil {
		errs = append(errs, fmt.Errorf("harness: group %s left behind: %w", n.Group, err))
	}
	return errors.Join(errs...)
}

// dropGroup deletes the namespace's consumer group if the cluster lists it. A
// group that never formed (no worker ran) is not an error; on a fresh broker
// there is not even a coordinator to ask (the offsets topic does not exist
// yet), so the listing, which needs none, decides. A listed group's
// coordinator may still be loading or moving: those answers are retried for
// a short while.
func (n *Namespace) dropGroup(ctx context.Context, adm *kadm.Client) error {
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return err
	}
	if _, ok := listed[n.Group]; !ok {
		return nil
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := adm.DeleteGroup(ctx, n.Group)
		switch {
		case err == nil, errors.Is(err, kerr.GroupIDNotFound):
			return nil
		case (errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.CoordinatorLoadInProgress) ||
			errors.Is(err, kerr.NotCoordinator) || errors.Is(err, kerr.NonEmptyGroup)) && time.Now().Before(deadline):
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (n *Namespace) dropRedis(ctx context.Context) error {
	rdb := redis.NewClient(&redis.Options{Addr: n.infra.RedisAddr})
	defer func() { _ = rdb.Close() }()
	return DeleteRedisPrefix(ctx, rdb, n.RedisPrefix)
}

// DeleteRedisPrefix unlinks every key that starts with prefix, scanning in
// batches of 1,000.
func DeleteRedisPrefix(ctx context.Context, rdb *redis.Client, prefix string) error {
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	var errs []error
	flush := func() {
		if len(batch) > 0 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				errs = append(errs, err)
			}
			batch = batch[:0]
		}
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			flush()
		}
	}
	if err := iter.Err(); err != nil {
		errs = append(errs, err)
	}
	flush()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("harness: redis keys %s* left behind: %w", prefix, err)
	}
	return nil
}

func (n *Namespace) dropZooKeeper() error {
	conn, events, err := zk.Connect(n.infra.ZooKeeperAddrs, 5*time.Second, zk.WithLogInfo(false), zk.WithLogger(discardZKLog{}))
	if err != nil {
		return fmt.Errorf("harness: election %s left behind: %w", n.ElectionPath, err)
	}
	// The event channel closes when the client's goroutine exits; draining
	// it until then is how Close is waited for.
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for range events {
		}
	}()
	defer func() { conn.Close(); <-drained }()
	if err := DeleteZNodeTree(conn, n.ElectionPath); err != nil {
		return fmt.Errorf("harness: election %s left behind: %w", n.ElectionPath, err)
	}
	return nil
}

type discardZKLog struct{}

func (discardZKLog) Printf(string, ...any) {}

// DeleteZNodeTree deletes znode p and everything below it, children first.
// Nodes that vanish meanwhile (ephemerals of closing sessions) are fine.
func DeleteZNodeTree(conn *zk.Conn, p string) error {
	children, _, err := conn.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, c := range children {
		if err := DeleteZNodeTree(conn, path.Join(p, c)); err != nil {
			return err
		}
	}
	err = conn.Delete(p, -1)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return nil
	case errors.Is(err, zk.ErrNotEmpty): // a child was created meanwhile
		return DeleteZNodeTree(conn, p)
	}
	return err
}
