//go:build integration

package netns

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/testkit/harness"
)

// A Redis client inside the namespace (its dialer runs there, as a worker
// started with `ip netns exec` would) reaches the real Redis through a
// forwarder, fails while the forwarder is cut though the host's client
// keeps working, and works again once the forwarder resumes, on the same
// client: what worker-cut-redis does to a worker.
func TestRedisClientThroughACut(t *testing.T) {
	n := newNamespace(t)
	addr := harness.EnvOr(harness.EnvRedisAddr, harness.DefaultRedisAddr)
	f := n.Into(addr)
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)

	inside := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		Dialer: func(ctx context.Context, _, addr string) (net.Conn, error) { return n.Dial(ctx, addr) }})
	defer inside.Close()
	host := redis.NewClient(&redis.Options{Addr: addr})
	defer host.Close()

	ctx := t.Context()
	key, err := harness.UniqueName("sundial_netns_test", 40)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Del(context.Background(), key) })
	if err := inside.Set(ctx, key, "before", time.Minute).Err(); err != nil {
		t.Fatalf("SET from inside: %v", err)
	}

	if f.Cut() == 0 {
		t.Fatal("the cut closed no connection: the client was not connected through the forwarder")
	}
	if err := inside.Get(ctx, key).Err(); err == nil {
		t.Fatal("GET from inside succeeded during the cut")
	}
	if v, err := host.Get(ctx, key).Result(); err != nil || v != "before" {
		t.Fatalf("GET from the host during the cut: %q, %v", v, err)
	}

	if err := f.Resume(); err != nil {
		t.Fatal(err)
	}
	// The pool may hand out a connection the cut closed once more before
	// it dials again: a few tries, no sleeping on a guess.
	var getErr error
	for range 5 {
		var v string
		if v, getErr = inside.Get(ctx, key).Result(); getErr == nil {
			if v != "before" {
				t.Fatalf("GET from inside after the cut: %q", v)
			}
			break
		}
	}
	if getErr != nil {
		t.Fatalf("GET from inside after the cut: %v", getErr)
	}
}
