package lease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ParseAddrs reads a --redis-addr: one host:port (a single Redis), or
// several, comma-separated, the seed nodes of a Redis Cluster (any of its
// nodes; the client learns the rest and their slots from them).
func ParseAddrs(s string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return nil, fmt.Errorf("%q is not host:port", a)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, errors.New("must name a host:port (or several, comma-separated, for a Redis Cluster)")
	}
	return out, nil
}

// NewClient is the services' Redis client over addrs (ParseAddrs): a
// *redis.Client for one address, a *redis.ClusterClient for several. Both
// run the lease and limit scripts through the same code (see New);
// dialer, when set, dials every connection (tests that cut the network).
func NewClient(addrs []string, sec Security, dialer func(ctx context.Context, network, addr string) (net.Conn, error)) (redis.UniversalClient, error) {
	var o redis.Options
	if err := sec.Apply(&o); err != nil {
		return nil, err
	}
	uo := &redis.UniversalOptions{
		Addrs:                      addrs,
		Dialer:                     dialer,
		Username:                   o.Username,
		Password:                   o.Password,
		CredentialsProviderContext: o.CredentialsProviderContext,
		TLSConfig:                  o.TLSConfig,
		// Several addresses are a cluster's seeds; one is a single Redis.
		IsClusterMode: len(addrs) > 1,
	}
	return redis.NewUniversalClient(uo), nil
}
