//go:build integration

package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// promptly is how long a refused secure connection may take to say so: a
// wrong password or an untrusted certificate is an answer, not a timeout.
const promptly = 10 * time.Second

// The TLS port and ACL user deploy/local/infra.sh configures on the shared
// Redis: a lease taken over TLS as that user, limited to its key prefixes;
// a wrong password, a CA that did not sign the server's certificate and a
// plaintext client each refused at once by Check, with an error naming
// Redis.
func TestSecureRedisListener(t *testing.T) {
	addr := testinfra.SecureRedisAddr(t)
	cred := testinfra.SecureCredentials()
	secure := lease.Security{
		Username: cred.Username,
		Password: connsec.Password{Value: connsec.NewSecret(cred.Password)},
		TLS:      connsec.TLS{Enabled: true, CAFile: testinfra.SecureCAFile(t)},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c := redisClient(t, addr, secure)
	require.NoError(t, lease.Check(ctx, c))
	prefix := "t:" + testinfra.UniqueName(t, 48) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		keys, err := c.Keys(ctx, prefix+"*").Result()
		if err == nil && len(keys) > 0 {
			err = c.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Logf("keys under %s left behind: %v", prefix, err)
		}
	})
	store := lease.New(c, lease.WithPrefix(prefix))
	ex := lease.Execution{JobID: "job-1", ExecutionID: "exec-1", Attempt: 1, Version: 1}
	res, err := store.Acquire(ctx, ex, "holder-a", time.Minute)
	require.NoError(t, err)
	require.Equal(t, lease.Acquired, res.Outcome)
	require.Positive(t, res.Fence)
	res, err = store.Acquire(ctx, ex, "holder-b", time.Minute)
	require.NoError(t, err)
	require.Equal(t, lease.Held, res.Outcome, "the lease taken over TLS is held")
	who, err := c.Do(ctx, "ACL", "WHOAMI").Text()
	require.NoError(t, err)
	require.Equal(t, cred.Username, who)
	require.ErrorContains(t, c.Set(ctx, "outside-the-prefixes", "v", time.Minute).Err(), "NOPERM",
		"the ACL user is limited to the t: and sundial: prefixes")

	refused := func(t *testing.T, s lease.Security, want string) error {
		t.Helper()
		start := time.Now()
		err := lease.Check(ctx, redisClient(t, addr, s))
		require.Error(t, err)
		require.Less(t, time.Since(start), promptly, "refused only after %v: %v", time.Since(start), err)
		require.ErrorContains(t, err, "redis at "+addr+": ")
		require.ErrorContains(t, err, want)
		t.Logf("%v (after %v)", err, time.Since(start).Round(time.Millisecond))
		return err
	}
	t.Run("wrong password", func(t *testing.T) {
		wrong := secure
		wrong.Password = connsec.Password{Value: connsec.NewSecret("not-the-password")}
		require.ErrorIs(t, refused(t, wrong, "WRONGPASS"), connsec.ErrRefused)
	})
	t.Run("untrusted CA", func(t *testing.T) {
		other := secure
		other.TLS.CAFile = tlstest.NewCA(t, "other").CertFile
		require.ErrorIs(t, refused(t, other, "certificate signed by unknown authority"), connsec.ErrRefused)
	})
	t.Run("plaintext on the TLS port", func(t *testing.T) {
		plain := secure
		plain.TLS = connsec.TLS{}
		refused(t, plain, "a TLS port, without --redis-tls?")
	})
	// The plaintext port never answers a TLS handshake: the dial timeout
	// (5 s here) ends it, once, not once per retry.
	t.Run("TLS on the plaintext port", func(t *testing.T) {
		start := time.Now()
		err := lease.Check(ctx, redisClient(t, testinfra.RedisAddr(t), secure))
		require.Error(t, err)
		require.Less(t, time.Since(start), promptly)
		require.ErrorContains(t, err, "redis at ")
		require.ErrorContains(t, err, "is it Redis's tls-port?")
		t.Logf("%v (after %v)", err, time.Since(start).Round(time.Millisecond))
	})
}
