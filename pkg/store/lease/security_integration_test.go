//go:build integration

package lease_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// redisClient builds a client the way the services do: Options with the
// address, then Apply.
func redisClient(t *testing.T, addr string, r lease.Security) *redis.Client {
	t.Helper()
	o := redis.Options{Addr: addr, MaxRetries: 1, DialTimeout: 5 * time.Second}
	require.NoError(t, r.Apply(&o))
	c := redis.NewClient(&o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// An ACL user of the test's own on the shared Redis: the right password
// works (and only on the keys the ACL grants), a wrong one is refused, and
// a rotated password file is used by the next connection without a new
// client.
func TestRedisACLUser(t *testing.T) {
	admin, prefix := testinfra.Redis(t)
	addr := testinfra.RedisAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	user := "sundial_" + testinfra.UniqueName(t, 40)
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">first-password", "~"+prefix+"*", "+@all").Err())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := admin.Do(ctx, "ACL", "DELUSER", user).Err(); err != nil {
			t.Logf("redis ACL user %s left behind: %v", user, err)
		}
	})

	pwFile := writeSecretFile(t, "redis-password", "first-password\n")
	c := redisClient(t, addr, lease.Security{Username: user, Password: connsec.Password{File: pwFile}})
	require.NoError(t, c.Set(ctx, prefix+"k", "v", time.Minute).Err())
	who, err := c.Do(ctx, "ACL", "WHOAMI").Text()
	if err == nil { // ACL WHOAMI needs +acl, which +@all grants
		require.Equal(t, user, who)
	}
	err = c.Set(ctx, "outside-the-prefix", "v", time.Minute).Err()
	require.ErrorContains(t, err, "NOPERM", "the ACL of this user applies, not the default user's")

	wrong := redisClient(t, addr, lease.Security{Username: user, Password: connsec.Password{Value: connsec.NewSecret("wrong-password")}})
	err = wrong.Ping(ctx).Err()
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "WRONGPASS"), "err = %v", err)

	// Rotate: new password on the server, then in the file; drop the
	// user's connections so the client opens new ones.
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "resetpass", ">second-password").Err())
	require.NoError(t, os.WriteFile(pwFile, []byte("second-password\n"), 0o600))
	require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "USER", user).Err())
	require.Eventually(t, func() bool { return c.Get(ctx, prefix+"k").Err() == nil }, 10*time.Second, 50*time.Millisecond)
}

// A Redis of the test's own with TLS only, client certificates required,
// and an ACL user: the client connects through connsec with the CA, its
// certificate and the password; without its certificate, or trusting
// another CA, it cannot.
func TestRedisTLS(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	require.NoError(t, err, "redis-server (Debian's redis-server package, which deploy/local/infra.sh installs) is needed")
	ca := tlstest.NewCA(t, "redis")
	server := ca.Server("redis-server")
	client := ca.Client("redis-client", "sundial-worker")
	port := freePort(t)
	dir := t.TempDir()
	logFile := filepath.Join(dir, "redis.log")
	cmd := exec.Command(bin,
		"--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", server.CertFile, "--tls-key-file", server.KeyFile, "--tls-ca-cert-file", ca.CertFile,
		"--tls-auth-clients", "yes",
		// Arguments after an option are its words, as in redis.conf.
		"--user", "default", "off", "--user", "sundial", "on", ">tls-password", "~*", "+@all",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", logFile)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.After(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("redis-server exited (%v); its log:\n%s", waitErr, readFile(logFile))
		case <-deadline:
			t.Fatalf("redis-server is not listening on %s after 30s; its log:\n%s", addr, readFile(logFile))
		case <-time.After(50 * time.Millisecond):
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	secure := lease.Security{
		Username: "sundial",
		Password: connsec.Password{Value: connsec.NewSecret("tls-password")},
		TLS:      connsec.TLS{Enabled: true, CAFile: ca.CertFile, CertFile: client.CertFile, KeyFile: client.KeyFile},
	}
	c := redisClient(t, addr, secure)
	require.NoError(t, c.Set(ctx, "k", "over tls", time.Minute).Err())
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	require.Equal(t, "over tls", got)

	noCert := secure
	noCert.TLS.CertFile, noCert.TLS.KeyFile = "", ""
	require.Error(t, redisClient(t, addr, noCert).Ping(ctx).Err(), "the server requires a client certificate")

	otherCA := secure
	otherCA.TLS.CAFile = tlstest.NewCA(t, "other").CertFile
	err = redisClient(t, addr, otherCA).Ping(ctx).Err()
	require.ErrorContains(t, err, "certificate signed by unknown authority")

	plaintext := secure
	plaintext.TLS = connsec.TLS{}
	require.Error(t, redisClient(t, addr, plaintext).Ping(ctx).Err(), "the port speaks only TLS")
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func readFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// writeSecretFile writes content into a file of the test's own, as a
// mounted Secret would be.
func writeSecretFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}
