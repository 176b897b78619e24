//go:build integration

package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// The api's startup against Postgres's secure user (SCRAM over TLS only,
// deploy/local/infra.sh): New pings and migrates with the right DSN; a
// wrong password, a CA that did not sign the server's certificate, or the
// same user without TLS each stop New within seconds, the error naming
// Postgres.
func TestAPIStartsOnlyWithTheRightPostgresSettings(t *testing.T) {
	dsn := testinfra.SecurePostgresDSN(t)
	schema := testinfra.UniqueName(t, 63)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The secure user makes a schema of its own for the migrations, dropped at the end.
	admin, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `CREATE SCHEMA "`+schema+`"`)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, `DROP SCHEMA "`+schema+`" CASCADE`); err != nil {
			t.Logf("schema %s left behind: %v", schema, err)
		}
		_ = admin.Close(ctx)
	})
	with := func(mod func(u *url.URL, q url.Values)) string {
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		q := u.Query()
		mod(u, q)
		u.RawQuery = q.Encode()
		return testinfra.WithSearchPath(u.String(), schema)
	}
	newAPI := func(dsn string) (time.Duration, error) {
		var cfg Config
		fs := flag.NewFlagSet("api", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.Register(fs)
		require.NoError(t, config.Load(fs, []string{"--tokens", "t=acme", "--postgres-dsn", dsn, "--grpc-addr", "127.0.0.1:0"},
			func(string) (string, bool) { return "", false }))
		var p config.Problems
		cfg.Validate(&p)
		require.NoError(t, p.Err())
		t0 := time.Now()
		a, err := New(ctx, cfg, Deps{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
		took := time.Since(t0)
		if err == nil {
			for i := len(a.Services) - 1; i >= 0; i-- {
				a.Services[i].Stop()
			}
		}
		return took, err
	}
	_, err = newAPI(with(func(*url.URL, url.Values) {}))
	require.NoError(t, err, "the right settings")
	for name, c := range map[string]struct {
		mod  func(u *url.URL, q url.Values)
		want string
	}{
		"wrong password": {func(u *url.URL, _ url.Values) { u.User = url.UserPassword(u.User.Username(), "not-the-password") }, "password authentication failed"},
		"untrusted CA":   {func(_ *url.URL, q url.Values) { q.Set("sslrootcert", tlstest.NewCA(t, "other").CertFile) }, "certificate signed by unknown authority"},
		"without TLS":    {func(_ *url.URL, q url.Values) { q.Set("sslmode", "disable"); q.Del("sslrootcert") }, "no encryption"},
	} {
		took, err := newAPI(with(c.mod))
		require.ErrorContains(t, err, "postgres: ", name)
		require.ErrorContains(t, err, c.want, name)
		require.Less(t, took, 10*time.Second, name)
		t.Logf("%s: %v (after %v)", name, err, took.Round(time.Millisecond))
	}
}
