//go:build integration

package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// The api's startup, against Redis's TLS port and ACL user as
// deploy/local/infra.sh configures them: with the right settings the
// Redis client's owner starts; with a wrong password, or a CA that did not
// sign Redis's certificate, it fails within seconds, the error naming
// Redis — where every version publish would otherwise fail.
func TestAPIStartsOnlyWithTheRightRedisSettings(t *testing.T) {
	dsn := testinfra.PostgresDSN(t)
	cred := testinfra.SecureCredentials()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(password, caFile string) (time.Duration, error) {
		var cfg Config
		fs := flag.NewFlagSet("api", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.Register(fs)
		require.NoError(t, config.Load(fs, []string{
			"--tokens", "t=acme", "--postgres-dsn", dsn, "--grpc-addr", "127.0.0.1:0", "--http-addr", "",
			"--redis-addr", testinfra.SecureRedisAddr(t), "--redis-tls", "--redis-tls-ca-file", caFile,
			"--redis-username", cred.Username,
		}, func(k string) (string, bool) {
			if k == "SUNDIAL_REDIS_PASSWORD" {
				return password, true
			}
			return "", false
		}))
		var p config.Problems
		cfg.Validate(&p)
		require.NoError(t, p.Err())
		a, err := New(ctx, cfg, Deps{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
		require.NoError(t, err, "New reaches Postgres only")
		defer func() {
			for i := len(a.Services) - 1; i >= 0; i-- {
				a.Services[i].Stop() // never started: each is stoppable before Start
			}
		}()
		var owner lifecycle.Service
		for _, s := range a.Services {
			if o, ok := s.(redisOwner); ok {
				owner = o
			}
		}
		require.NotNil(t, owner, "no Redis owner among the services")
		t0 := time.Now()
		err = owner.Start(ctx)
		return time.Since(t0), err
	}
	_, err := start(cred.Password, testinfra.SecureCAFile(t))
	require.NoError(t, err)
	for name, c := range map[string]struct{ password, ca, want string }{
		"wrong password": {"not-the-password", testinfra.SecureCAFile(t), "WRONGPASS"},
		"untrusted CA":   {cred.Password, tlstest.NewCA(t, "other").CertFile, "certificate signed by unknown authority"},
	} {
		took, err := start(c.password, c.ca)
		require.ErrorIs(t, err, connsec.ErrRefused, name)
		require.ErrorContains(t, err, "redis at ", name)
		require.ErrorContains(t, err, c.want, name)
		require.Less(t, took, 10*time.Second, name)
		t.Logf("%s: %v (after %v)", name, err, took.Round(time.Millisecond))
	}
}
