package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/testkit/harness"
)

// ChaosClusterRows are the faults of the components' clustered modes: each
// needs the deployment on that cluster (Deploy.RedisCluster for the Redis
// rows) and is not in the full matrix of single nodes (ChaosRows).
var ChaosClusterRows = []string{"redis-cluster-primary-kill"}

// singleRedisRows act on the single Redis, which a deployment on a Redis
// Cluster does not use: they would measure nothing.
var singleRedisRows = []string{"redis-flush", "redis-restart", "worker-cut-redis", "worker-drop-redis"}

// ChaosRowsFor is the full matrix a deployment can take: ChaosRows, and on
// a Redis Cluster those without the single-Redis rows, then its cluster
// rows.
func ChaosRowsFor(d Deploy) []string {
	if d.RedisCluster == "" {
		return ChaosRows
	}
	rows := slices.DeleteFunc(slices.Clone(ChaosRows), func(r string) bool { return slices.Contains(singleRedisRows, r) })
	return append(rows, ChaosClusterRows...)
}

// CheckChaosRows reports a row that cannot run on the deployment: a
// cluster row without its cluster, or a single-Redis row beside a Redis
// Cluster.
func CheckChaosRows(rows []string, d Deploy) error {
	for _, row := range rows {
		switch {
		case row == "redis-cluster-primary-kill" && d.RedisCluster == "":
			return fmt.Errorf("--rows: %s needs --redis-cluster (the deployment on a Redis Cluster: CLUSTER=redis make infra-up)", row)
		case d.RedisCluster != "" && slices.Contains(singleRedisRows, row):
			return fmt.Errorf("--rows: %s acts on the single Redis, which a deployment on --redis-cluster does not use", row)
		}
	}
	return nil
}

// redisClusterPrimaryKill SIGKILLs a primary of the deployment's Redis
// Cluster (one whose replica is in sync), waits for that replica to be
// promoted, then starts the killed node again (ChaosConfig.RedisCluster
// "up"), which rejoins as a replica. What the services see: every command
// on the dead primary's slots fails until the cluster notices
// (cluster-node-timeout) and the replica takes over; the clients follow
// the new slot map on their own.
func (c *chaos) redisClusterPrimaryKill(ctx context.Context) (string, error) {
	if c.cfg.RedisCluster == nil {
		return "", errors.New("chaos: no cluster/redis.sh runner")
	}
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
	promoted := time.Duration(0)
	for deadline := killed.Add(time.Minute); promoted == 0; {
		if info, err := rc.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "role:master") {
			promoted = c.r.clock.Now().Sub(killed)
			break
		}
		if c.r.clock.Now().After(deadline) {
			return "", fmt.Errorf("chaos: the replica %s of the killed primary %s was not promoted within a minute", replica, victim)
		}
		if err := Sleep(ctx, c.r.clock, 50*time.Millisecond); err != nil {
			return "", err
		}
	}
	// Down a while longer than the failover itself, as a node that died
	// is not back at once; `up` starts it and waits for the cluster to be
	// whole, its replicas in sync.
	if err := Sleep(ctx, c.r.clock, max(c.cfg.Outage-promoted, 0)); err != nil {
		return "", err
	}
	if err := c.cfg.RedisCluster(context.WithoutCancel(ctx), "up"); err != nil {
		return "", err
	}
	back := c.r.clock.Now().Sub(killed)
	return fmt.Sprintf("primary %s killed; its replica %s promoted after %s; the node started again and in sync as a replica %s after the kill",
		victim, replica, promoted.Round(10*time.Millisecond), back.Round(100*time.Millisecond)), nil
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
				port = v
			}
		}
		if ip != "" && port != "" {
			return net.JoinHostPort(ip, port)
		}
	}
	return ""
}
