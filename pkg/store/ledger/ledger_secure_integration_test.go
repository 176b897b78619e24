//go:build integration

package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// The secure Cassandra node deploy/local/infra.sh runs (PasswordAuthenticator,
// client TLS required): the ledger connects with its login and the local
// CA through Security.Apply, migrates a keyspace and writes and reads an
// attempt. A wrong password, a CA that did not sign the node's certificate
// and a plaintext client are each refused by Connect promptly, the error
// naming Cassandra.
func TestSecureCassandra(t *testing.T) {
	hosts := testinfra.SecureCassandraHosts(t)
	cred := testinfra.SecureCassandraCredentials()
	secure := ledger.Security{
		Username: cred.Username,
		Password: connsec.Password{Value: connsec.NewSecret(cred.Password)},
		TLS:      connsec.TLS{Enabled: true, CAFile: testinfra.SecureCAFile(t)},
	}
	connect := func(t *testing.T, sec ledger.Security) (ledger.Session, error) {
		t.Helper()
		cfg := ledger.ConnectConfig{Hosts: hosts, Timeout: 30 * time.Second}
		require.NoError(t, sec.Apply(&cfg))
		return ledger.Connect(cfg)
	}
	s, err := connect(t, secure)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	ks := testinfra.UniqueName(t, 48)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Exec(ctx, ledger.Statement{CQL: "DROP KEYSPACE IF EXISTS " + ks}); err != nil {
			t.Logf("keyspace %s left behind: %v", ks, err)
		}
	})
	require.NoError(t, ledger.Migrate(ctx, s, ks, ledger.DefaultReplication))
	w, r := ledger.NewWriter(s, ks), ledger.NewReader(s, ks)
	a := attempt(uuid.New(), time.Now().UTC().Truncate(time.Second), 1, 7, succeeded)
	require.NoError(t, w.Record(ctx, a))
	got, err := r.GetExecution(ctx, a.ExecutionId)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.True(t, proto.Equal(a, got[0]), "got %v, want %v", got[0], a)

	refused := func(t *testing.T, sec ledger.Security, want string) {
		t.Helper()
		start := time.Now()
		s, err := connect(t, sec)
		if err == nil {
			s.Close()
		}
		require.Error(t, err)
		require.Less(t, time.Since(start), 10*time.Second, "refused only after %v: %v", time.Since(start), err)
		require.ErrorContains(t, err, "connect to cassandra at ")
		require.ErrorContains(t, err, want)
		t.Logf("%v (after %v)", err, time.Since(start).Round(time.Millisecond))
	}
	t.Run("wrong password", func(t *testing.T) {
		wrong := secure
		wrong.Password = connsec.Password{Value: connsec.NewSecret("not-the-password")}
		refused(t, wrong, "Provided username cassandra and/or password are incorrect")
	})
	t.Run("untrusted CA", func(t *testing.T) {
		other := secure
		other.TLS.CAFile = tlstest.NewCA(t, "other").CertFile
		refused(t, other, "certificate signed by unknown authority")
	})
	t.Run("plaintext", func(t *testing.T) {
		plain := secure
		plain.TLS = connsec.TLS{}
		refused(t, plain, "")
	})
	t.Run("no credentials", func(t *testing.T) {
		anonymous := secure
		anonymous.Username, anonymous.Password = "", connsec.Password{}
		refused(t, anonymous, "authentication required")
	})
}
