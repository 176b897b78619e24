package lease_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/store/lease"
)

// One address is a single Redis, several a Redis Cluster's nodes; an
// address without a port is refused, naming it.
func TestParseAddrsAndNewClient(t *testing.T) {
	one, err := lease.ParseAddrs("127.0.0.1:6379")
	if err != nil || len(one) != 1 {
		t.Fatalf("one: %v, %v", one, err)
	}
	several, err := lease.ParseAddrs(" 127.0.0.1:7101, 127.0.0.1:7102,,")
	if err != nil || len(several) != 2 || several[1] != "127.0.0.1:7102" {
		t.Fatalf("several: %q, %v", several, err)
	}
	for _, bad := range []string{"", " , ", "127.0.0.1", "127.0.0.1:6379,redis"} {
		if _, err := lease.ParseAddrs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.Contains(bad, "redis") && !strings.Contains(err.Error(), `"redis"`) {
			t.Errorf("%q: %v does not name the bad address", bad, err)
		}
	}
	c, err := lease.NewClient(one, lease.Security{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, ok := c.(*redis.Client); !ok {
		t.Errorf("one address: %T, want *redis.Client", c)
	}
	cc, err := lease.NewClient(several, lease.Security{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	if _, ok := cc.(*redis.ClusterClient); !ok {
		t.Errorf("several addresses: %T, want *redis.ClusterClient", cc)
	}
}
