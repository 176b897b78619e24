package testinfra

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvRedisClusterAddrs names the local Redis Cluster's nodes, as
// `deploy/local/cluster/redis.sh env` prints them (comma-separated).
const EnvRedisClusterAddrs = "SUNDIAL_TEST_REDIS_CLUSTER_ADDRS"

// DefaultRedisClusterAddrs match deploy/local/cluster/redis.sh's default
// ports.
const DefaultRedisClusterAddrs = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103,127.0.0.1:7104,127.0.0.1:7105,127.0.0.1:7106"

// RedisClusterAddrs are the test Redis Cluster's nodes
// (SUNDIAL_TEST_REDIS_CLUSTER_ADDRS or the default), checked that one
// accepts connections. Like every component, a cluster that is not
// running fails the test, never skips it.
func RedisClusterAddrs(t testing.TB) []string {
	t.Helper()
	addrs := splitList(envOr(EnvRedisClusterAddrs, DefaultRedisClusterAddrs))
	requireReachable(t, "the Redis Cluster (CLUSTER=1 make infra-up, or deploy/local/cluster/redis.sh up)", EnvRedisClusterAddrs, addrs)
	return addrs
}

// RedisCluster returns a client of the test Redis Cluster, checked to say
// cluster_state:ok, and a key prefix of the test's own, as Redis does: keys
// matching it are deleted on every primary when the test ends.
func RedisCluster(t testing.TB) (*redis.ClusterClient, string) {
	t.Helper()
	addrs := RedisClusterAddrs(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := rdb.ClusterInfo(ctx).Result()
	if err == nil && !containsLine(info, "cluster_state:ok") {
		err = errors.New("cluster_state is not ok")
	}
	if err != nil {
		_ = rdb.Close()
		t.Fatalf("%s", unreachable("the Redis Cluster", EnvRedisClusterAddrs, addrs[0], "CLUSTER INFO: "+err.Error()))
	}
	prefix := "t:" + UniqueName(t, 64) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				if err := node.Unlink(ctx, iter.Val()).Err(); err != nil {
					return err
				}
			}
			return iter.Err()
		})
		if err != nil {
			t.Logf("testinfra: redis cluster keys %s* left behind: %v", prefix, err)
		}
		_ = rdb.Close()
	})
	return rdb, prefix
}

func containsLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimRight(l, "\r") == line {
			return true
		}
	}
	return false
}
