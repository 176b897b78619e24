//go:build integration

package migrations_test

import (
	"context"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/postgres/migrations"
	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// The secure Postgres user deploy/local/infra.sh creates: SCRAM over TLS,
// verified against the local CA (sslmode=verify-full), runs every
// migration into a schema of its own; the same user without TLS, with a
// wrong password or trusting another CA is refused promptly, each error
// saying why.
func TestSecurePostgres(t *testing.T) {
	dsn := testinfra.SecurePostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	admin, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer func() { _ = admin.Close(context.Background()) }()
	var ssl bool
	var user string
	require.NoError(t, admin.QueryRow(ctx, `SELECT ssl, current_user FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl, &user))
	require.True(t, ssl, "the session runs over TLS")
	require.Equal(t, testinfra.SecureCredentials().Username, user)

	schema := testinfra.UniqueName(t, 63)
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dsn)
		if err == nil {
			_, err = c.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			_ = c.Close(ctx)
		}
		if err != nil {
			t.Logf("schema %s left behind: %v", schema, err)
		}
	})
	pool, err := pgxpool.New(ctx, testinfra.WithSearchPath(dsn, schema))
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, migrations.Up(ctx, pool, slog.New(slog.DiscardHandler)))
	v, err := migrations.Version(ctx, pool)
	require.NoError(t, err)
	require.GreaterOrEqual(t, v, int64(4))

	refused := func(t *testing.T, dsn, want string) {
		t.Helper()
		start := time.Now()
		p, err := pgxpool.New(ctx, dsn)
		require.NoError(t, err) // the pool connects lazily
		defer p.Close()
		err = p.Ping(ctx)
		require.Error(t, err)
		require.Less(t, time.Since(start), 10*time.Second, "refused only after %v: %v", time.Since(start), err)
		require.ErrorContains(t, err, want)
		t.Logf("%v (after %v)", err, time.Since(start).Round(time.Millisecond))
	}
	with := func(mod func(u *url.URL, q url.Values)) string {
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		q := u.Query()
		mod(u, q)
		u.RawQuery = q.Encode()
		return u.String()
	}
	t.Run("wrong password", func(t *testing.T) {
		refused(t, with(func(u *url.URL, _ url.Values) { u.User = url.UserPassword(u.User.Username(), "not-the-password") }),
			"password authentication failed")
	})
	t.Run("untrusted CA", func(t *testing.T) {
		other := tlstest.NewCA(t, "other").CertFile
		refused(t, with(func(_ *url.URL, q url.Values) { q.Set("sslrootcert", other) }), "certificate signed by unknown authority")
	})
	t.Run("without TLS", func(t *testing.T) {
		refused(t, with(func(_ *url.URL, q url.Values) { q.Set("sslmode", "disable"); q.Del("sslrootcert") }),
			"no encryption")
	})
}
