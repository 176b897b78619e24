package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// ClusterComponents are the components the cluster profile runs in a
// clustered mode that a deployment can reach (deploy/local/cluster/*.sh,
// by script name).
var ClusterComponents = []string{"redis", "zookeeper", "postgres", "kafka", "cassandra"}

// clusteredName is how a deployment's description names a clustered
// component (Deploy.Clustered; Redis by Deploy.RedisCluster).
var clusteredName = map[string]string{
	"zookeeper": "a ZooKeeper ensemble of 3",
	"postgres":  "Postgres primary + synchronous standby (multi-host DSN)",
	"kafka":     "3 Kafka brokers (replication factor 3, min.insync.replicas 2)",
	"cassandra": "a 3-node Cassandra ring (the ledger at replication factor 3, LOCAL_QUORUM)",
}

// RingReplication is the ledger keyspace's replication on the Cassandra
// ring: every record on the three nodes, so LOCAL_QUORUM (two) holds
// with one down.
const RingReplication = "{'class': 'SimpleStrategy', 'replication_factor': 3}"

// ChaosClusterRows are the faults of the components' clustered modes: each
// needs the deployment on that cluster and is not in the full matrix of
// single nodes (ChaosRows).
var ChaosClusterRows = []string{"redis-cluster-primary-kill", "zookeeper-leader-kill", "zookeeper-member-stall", "kafka-broker-kill", "postgres-primary-kill", "cassandra-node-kill"}

// clusterRowNeeds is the component each cluster row fails over.
var clusterRowNeeds = map[string]string{
	"redis-cluster-primary-kill": "redis",
	"zookeeper-leader-kill":      "zookeeper",
	"zookeeper-member-stall":     "zookeeper",
	"kafka-broker-kill":          "kafka",
	"postgres-primary-kill":      "postgres",
	"cassandra-node-kill":        "cassandra",
}

// singleNodeRows are the rows that act on a component's single node,
// which a deployment on its cluster does not use: they would measure
// nothing.
var singleNodeRows = map[string][]string{
	"redis":     {"redis-flush", "redis-restart", "worker-cut-redis", "worker-drop-redis"},
	"kafka":     {"kafka-restart", "worker-cut-kafka", "worker-drop-kafka"},
	"zookeeper": {"zookeeper-stop"},
	"postgres":  {"postgres-stop"},
	"cassandra": {"cassandra-stop"},
}

// clustered is the components d reaches in their clustered mode.
func clustered(d Deploy) []string {
	out := slices.Clone(d.Clustered)
	if d.RedisCluster != "" {
		out = append(out, "redis")
	}
	return out
}

// ChaosRowsFor is the full matrix a deployment can take: ChaosRows less
// the rows of the single nodes it does not use, then the cluster rows of
// the components it reaches clustered.
func ChaosRowsFor(d Deploy) []string {
	on := clustered(d)
	rows := slices.DeleteFunc(slices.Clone(ChaosRows), func(r string) bool {
		for _, c := range on {
			if slices.Contains(singleNodeRows[c], r) {
				return true
			}
		}
		return false
	})
	for _, r := range ChaosClusterRows {
		if slices.Contains(on, clusterRowNeeds[r]) {
			rows = append(rows, r)
		}
	}
	return rows
}

// CheckChaosRows reports a row that cannot run on the deployment: a
// cluster row without its cluster, or a single node's row beside that
// component's cluster.
func CheckChaosRows(rows []string, d Deploy) error {
	on := clustered(d)
	for _, row := range rows {
		if need, ok := clusterRowNeeds[row]; ok && !slices.Contains(on, need) {
			return fmt.Errorf("--rows: %s needs the deployment on the %s cluster (--cluster %s; CLUSTER=%s make infra-up)", row, need, need, need)
		}
		for _, c := range on {
			if slices.Contains(singleNodeRows[c], row) {
				return fmt.Errorf("--rows: %s acts on the single %s node, which a deployment on the %s cluster does not use", row, c, c)
			}
		}
	}
	return nil
}

// redisClusterPrimaryKill SIGKILLs a primary of the deployment's Redis
// Cluster (one whose replica is in sync), waits for that replica to be
// promoted, then starts the killed node again (cluster/redis.sh up), which
// rejoins as a replica. What the services see: every command on the dead
// primary's slots fails until the cluster notices (cluster-node-timeout)
// and the replica takes over; the clients follow the new slot map on
// their own.
func (c *chaos) redisClusterPrimaryKill(ctx context.Context) (string, error) {
	victim, replica, err := c.clusterVictim(ctx)
	if err != nil {
		return "", err
	}
	_, port, err := net.SplitHostPort(victim)
	if err != nil {
		return "", err
	}
	pid := harness.ComponentPid(c.r.opts.InfraDir, filepath.Join("redis-cluster", port))
	if pid == 0 {
		return "", fmt.Errorf("chaos: no pid file for the Redis Cluster node %s under %s", victim, c.r.opts.InfraDir)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return "", fmt.Errorf("chaos: kill the Redis Cluster primary %s (pid %d): %w", victim, pid, err)
	}
	killed := c.r.clock.Now()
	rc := redis.NewClient(&redis.Options{Addr: replica, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer func() { _ = rc.Close() }()
	promoted, err := c.waitFor(ctx, killed, "the replica "+replica+" of the killed primary "+victim+" promoted", func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	})
	if err != nil {
		return "", err
	}
	back, err := c.restartAfterOutage(ctx, killed, promoted, "redis")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("primary %s killed; its replica %s promoted after %s; the node started again and in sync as a replica %s after the kill",
		victim, replica, promoted.Round(10*time.Millisecond), back.Round(100*time.Millisecond)), nil
}

// zookeeperLeaderKill SIGKILLs the ensemble's leader, waits until another
// member leads, and starts the killed member again after the outage. The
// prefetchers' sessions live on the ensemble: each reconnects to a
// survivor within its session timeout and keeps its ranges and epochs;
// the two minutes staged ahead keep firing meanwhile.
func (c *chaos) zookeeperLeaderKill(ctx context.Context) (string, error) {
	out, err := c.cfg.Cluster(ctx, "zookeeper", "leader")
	if err != nil {
		return "", err
	}
	leader := strings.TrimSpace(out)
	if _, err := c.cfg.Cluster(ctx, "zookeeper", "kill", leader); err != nil {
		return "", err
	}
	killed := c.r.clock.Now()
	var next string
	elected, err := c.waitFor(ctx, killed, "a new ensemble leader", func() bool {
		out, err := c.cfg.Cluster(ctx, "zookeeper", "leader")
		next = strings.TrimSpace(out)
		return err == nil && next != "" && next != leader
	})
	if err != nil {
		return "", err
	}
	back, err := c.restartAfterOutage(ctx, killed, elected, "zookeeper")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("leader (node %s) killed; node %s leads after %s; node %s back in the ensemble %s after the kill",
		leader, next, elected.Round(10*time.Millisecond), leader, back.Round(100*time.Millisecond)), nil
}

// zookeeperMemberStall stops (SIGSTOP) the ensemble's follower that most
// clients are connected to, for Outage, then lets it go on (SIGCONT). To
// the leader it is a member gone silent, to its clients a server that
// answers nothing on open connections — what a member cut off by a
// network that drops its packets looks like. The majority goes on; the
// prefetchers' sessions on it must move to another server before they
// expire.
func (c *chaos) zookeeperMemberStall(ctx context.Context) (string, error) {
	out, err := c.cfg.Cluster(ctx, "zookeeper", "leader")
	if err != nil {
		return "", err
	}
	leader := strings.TrimSpace(out)
	member, conns := "", -1
	for n := 1; n <= 3; n++ {
		name := strconv.Itoa(n)
		if name == leader {
			continue
		}
		if k := establishedTo(zookeeperClientPort + n); k > conns {
			member, conns = name, k
		}
	}
	pid := harness.PidFile(filepath.Join(c.r.opts.InfraDir, "zk-ensemble", member, "pid"))
	if pid == 0 {
		return "", fmt.Errorf("chaos: zookeeper node %s is not running", member)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return "", fmt.Errorf("chaos: stop zookeeper node %s: %w", member, err)
	}
	stopped := c.r.clock.Now()
	slept := Sleep(ctx, c.r.clock, c.cfg.Outage)
	// Let it go on even when the run is cancelled.
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return "", fmt.Errorf("chaos: continue zookeeper node %s: %w", member, err)
	}
	if slept != nil {
		return "", slept
	}
	return fmt.Sprintf("follower node %s (%d client connections; node %s leads) stopped for %s, then let go on",
		member, conns, leader, c.r.clock.Now().Sub(stopped).Round(100*time.Millisecond)), nil
}

// zookeeperClientPort is the local ensemble's client port less its node
// number (deploy/local/cluster/zookeeper.sh: node N serves on 2190+N).
const zookeeperClientPort = 2190

// establishedTo counts the established TCP connections on this machine
// whose remote end is port: the clients of a local server there.
func establishedTo(port int) int {
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n += countEstablishedTo(string(b), port)
	}
	return n
}

// countEstablishedTo counts the lines of a /proc/net/tcp table in state
// 01 (established) whose remote address's port is port.
func countEstablishedTo(table string, port int) int {
	want := fmt.Sprintf(":%04X", port)
	n := 0
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[3] == "01" && strings.HasSuffix(f[2], want) {
			n++
		}
	}
	return n
}

// kafkaBrokerKill SIGKILLs the broker that leads the most partitions of
// the deployment's firing topics, waits until every one of them has a
// leader on another broker, and starts it again after the outage. The
// relay's acks=all produce needs two of three replicas
// (min.insync.replicas 2), so it goes on once the leaders moved; the
// workers' fetches and offset commits follow the new leaders and the
// group coordinator.
func (c *chaos) kafkaBrokerKill(ctx context.Context) (string, error) {
	topics := make([]string, 0, 4)
	for _, p := range []sundialv1.Priority{sundialv1.Priority_PRIORITY_CRITICAL, sundialv1.Priority_PRIORITY_HIGH, sundialv1.Priority_PRIORITY_MEDIUM, sundialv1.Priority_PRIORITY_LOW} {
		topics = append(topics, firing.Topics{Prefix: c.d.ns.TopicPrefix}.Fire(p))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.r.opts.Infra.KafkaBrokers...))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// leaders counts the firing topics' partitions by leader ("none": no
	// leader now).
	leaders := func() (map[string]int, int, error) {
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		md, err := adm.Metadata(mctx, topics...)
		if err != nil {
			return nil, 0, err
		}
		count, total := map[string]int{}, 0
		for _, t := range md.Topics {
			for _, p := range t.Partitions {
				total++
				if p.Leader < 0 || p.Err != nil {
					count["none"]++
					continue
				}
				count[strconv.Itoa(int(p.Leader))]++
			}
		}
		return count, total, nil
	}
	count, total, err := leaders()
	if err != nil {
		return "", err
	}
	victim, most := "", 0
	for n, k := range count {
		if k > most || (k == most && n < victim) {
			victim, most = n, k
		}
	}
	if victim == "" {
		return "", fmt.Errorf("chaos: no leader found for the topics %v", topics)
	}
	if _, err := c.cfg.Cluster(ctx, "kafka", "kill", victim); err != nil {
		return "", err
	}
	killed := c.r.clock.Now()
	moved, err := c.waitFor(ctx, killed, "every partition of the firing topics led by another broker", func() bool {
		count, n, err := leaders()
		return err == nil && n == total && count[victim] == 0 && count["none"] == 0
	})
	if err != nil {
		return "", err
	}
	back, err := c.restartAfterOutage(ctx, killed, moved, "kafka")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("broker %s (leading %d of %d partitions) killed; all led elsewhere after %s; the broker back with its replicas in sync %s after the kill",
		victim, most, total, moved.Round(10*time.Millisecond), back.Round(100*time.Millisecond)), nil
}

// postgresPrimaryKill stops the Postgres primary as a crash does and at
// once promotes the standby (the failover manager's part, whose detection
// time is left out), then rebuilds the old primary as the new standby
// (cluster/postgres.sh up). The services' pools hold a multi-host DSN with
// target_session_attrs=read-write and find the promoted node on their own.
func (c *chaos) postgresPrimaryKill(ctx context.Context) (string, error) {
	before, err := c.cfg.Cluster(ctx, "postgres", "primary")
	if err != nil {
		return "", err
	}
	if _, err := c.cfg.Cluster(ctx, "postgres", "kill-primary"); err != nil {
		return "", err
	}
	killed := c.r.clock.Now()
	if _, err := c.cfg.Cluster(ctx, "postgres", "promote"); err != nil {
		return "", err
	}
	promoted := c.r.clock.Now().Sub(killed)
	back, err := c.restartAfterOutage(ctx, killed, promoted, "postgres")
	if err != nil {
		return "", err
	}
	after, _ := c.cfg.Cluster(ctx, "postgres", "primary")
	return fmt.Sprintf("primary :%s killed; the standby :%s promoted %s after; the old primary rebuilt as its standby %s after the kill",
		strings.TrimSpace(before), strings.TrimSpace(after), promoted.Round(10*time.Millisecond), back.Round(100*time.Millisecond)), nil
}

// cassandraNodeKill SIGKILLs node 1 of the ring (the seed, and the
// services' first contact point), keeps it down for the matrix's
// Cassandra outage, and starts it again (cassandra.sh start 1 waits until
// the ring sees it up). With replication factor 3 at LOCAL_QUORUM every
// write and read needs two of three: the ledger goes on with one node
// down, and the node back gets what it missed from its peers' hints.
func (c *chaos) cassandraNodeKill(ctx context.Context) (string, error) {
	if _, err := c.cfg.Cluster(ctx, "cassandra", "kill", "1"); err != nil {
		return "", err
	}
	killed := c.r.clock.Now()
	if err := Sleep(ctx, c.r.clock, c.cfg.CassandraOutage); err != nil {
		return "", err
	}
	started := c.r.clock.Now()
	if _, err := c.cfg.Cluster(context.WithoutCancel(ctx), "cassandra", "start", "1"); err != nil {
		return "", err
	}
	return fmt.Sprintf("node 1 (the seed) killed, down %s; back in the ring %s after its start",
		started.Sub(killed).Round(100*time.Millisecond), c.r.clock.Now().Sub(started).Round(100*time.Millisecond)), nil
}

// waitFor polls cond every 50 ms until it holds, at most a minute after
// since, and returns how long after since it held.
func (c *chaos) waitFor(ctx context.Context, since time.Time, what string, cond func() bool) (time.Duration, error) {
	deadline := since.Add(time.Minute)
	for !cond() {
		if c.r.clock.Now().After(deadline) {
			return 0, fmt.Errorf("chaos: not within a minute: %s", what)
		}
		if err := Sleep(ctx, c.r.clock, 50*time.Millisecond); err != nil {
			return 0, err
		}
	}
	return c.r.clock.Now().Sub(since), nil
}

// restartAfterOutage keeps the killed node down for the matrix's outage
// (at least the failover itself: a node that died is not back at once),
// then runs the cluster script's up, which starts it and waits for the
// cluster to be whole, and returns how long after the kill that was.
func (c *chaos) restartAfterOutage(ctx context.Context, killed time.Time, failover time.Duration, component string) (time.Duration, error) {
	if err := Sleep(ctx, c.r.clock, max(c.cfg.Outage-failover, 0)); err != nil {
		return 0, err
	}
	if _, err := c.cfg.Cluster(context.WithoutCancel(ctx), component, "up"); err != nil {
		return 0, err
	}
	return c.r.clock.Now().Sub(killed), nil
}

// clusterVictim is a primary of the deployment's Redis Cluster whose
// replica is in sync, and that replica's address.
func (c *chaos) clusterVictim(ctx context.Context) (primary, replica string, err error) {
	deadline := c.r.clock.Now().Add(30 * time.Second)
	for {
		for _, addr := range strings.Split(c.r.opts.Deploy.RedisCluster, ",") {
			addr = strings.TrimSpace(addr)
			cl := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second})
			info, ierr := cl.Info(ctx, "replication").Result()
			_ = cl.Close()
			if ierr != nil || !strings.Contains(info, "role:master") {
				continue
			}
			if r := onlineReplica(info); r != "" {
				return addr, r, nil
			}
		}
		if c.r.clock.Now().After(deadline) {
			return "", "", fmt.Errorf("chaos: no primary of the Redis Cluster %s has a replica in sync", c.r.opts.Deploy.RedisCluster)
		}
		if err := Sleep(ctx, c.r.clock, 200*time.Millisecond); err != nil {
			return "", "", err
		}
	}
}

// onlineReplica is the address of the first replica INFO replication lists
// as online ("slave0:ip=127.0.0.1,port=7104,state=online,..."), or "".
func onlineReplica(info string) string {
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, "state=online") {
			continue
		}
		_, fields, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var ip, port string
		for _, kv := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				ip = v
			case "port":
				if _, err := strconv.Atoi(v); err == nil {
					port = v
				}
			}
		}
		if ip != "" && port != "" {
			return net.JoinHostPort(ip, port)
		}
	}
	return ""
}
