package testinfra

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/testkit/harness"
)

// RedisAddr is the test Redis's host:port (SUNDIAL_TEST_REDIS_ADDR or the
// default), checked to accept connections.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr := envOr(EnvRedisAddr, DefaultRedisAddr)
	requireReachable(t, "Redis", EnvRedisAddr, []string{addr})
	return addr
}

// Redis returns a client of the test Redis and a key prefix of the test's own
// ("t:<name>_<hex>:"). Every key the test writes should start with the prefix:
// when the test ends, keys matching it are deleted and the client is closed.
// The prefix has no braces, so keys may carry their own {hash tag} after it.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	addr := RedisAddr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		t.Fatalf("%s", unreachable("Redis", EnvRedisAddr, addr, "PING: "+err.Error()))
	}
	prefix := "t:" + UniqueName(t, 64) + ":"
	t.Cleanup(func() {
		deleteRedisPrefix(t, rdb, prefix)
		_ = rdb.Close()
	})
	return rdb, prefix
}

func deleteRedisPrefix(t testing.TB, rdb *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := harness.DeleteRedisPrefix(ctx, rdb, prefix); err != nil {
		t.Logf("testinfra: %v", err)
	}
}
