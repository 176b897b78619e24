package app

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/store/lease"

	"github.com/sundialhq/sundial/services/worker/internal/prepare"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// kekFile is a key-encryption key file, which every worker needs.
func kekFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kek")
	if err := os.WriteFile(path, []byte(strings.Repeat("k", 48)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// load loads and validates args and env, with a key-encryption key file
// unless they name one (an empty one: none).
func load(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	if _, ok := env["SUNDIAL_SIGNING_KEY_ENCRYPTION_KEY_FILE"]; !ok && !slices.Contains(args, "--signing-key-encryption-key-file") {
		args = append([]string{"--signing-key-encryption-key-file", kekFile(t)}, args...)
	}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	var c Config
	c.Register(fs)
	if err := config.Load(fs, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	var p config.Problems
	c.Validate(&p)
	return c, p.Err()
}

// The key-encryption key is all a worker needs beside the defaults: the
// tenants' keys sign, and the platform's secret is optional.
func TestDefaultsNeedOnlyAKeyEncryptionKey(t *testing.T) {
	_, err := load(t, nil, map[string]string{"SUNDIAL_SIGNING_KEY_ENCRYPTION_KEY_FILE": ""})
	if err == nil || !strings.Contains(err.Error(), "signing-key-encryption-key-file: required") || strings.Contains(err.Error(), "signing-secret") {
		t.Fatalf("no key-encryption key: %v", err)
	}
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := c.Secret(); err != nil || s != nil || !c.PlatformSignatureUntil.IsZero() {
		t.Fatalf("platform secret %q, until %s, %v: want none", s, c.PlatformSignatureUntil, err)
	}
	c, err = load(t, nil, map[string]string{"SUNDIAL_SIGNING_SECRET": "s"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Group != "sundial-workers" || c.SessionTimeout.Seconds() != 2 || c.TopicPrefix != "sundial" || c.RedisKeyPrefix != "sundial:" {
		t.Fatalf("defaults %+v", c)
	}
	if c.PrepareGrain != prepare.DefaultConfig.Grain || c.PrepareGrain <= 0 || c.CriticalExecutors <= 0 {
		t.Fatalf("spread firings must share lease calls and CRITICAL have executors of its own by default: grain %s, critical executors %d", c.PrepareGrain, c.CriticalExecutors)
	}
	if c.LowExecutorsPercent >= c.MediumExecutorsPercent || c.MediumExecutorsPercent >= c.HighExecutorsPercent || c.HighExecutorsPercent >= 100 {
		t.Fatalf("by default each priority must keep executors the less urgent cannot take: LOW %d%%, MEDIUM %d%%, HIGH %d%%",
			c.LowExecutorsPercent, c.MediumExecutorsPercent, c.HighExecutorsPercent)
	}
	if s, err := c.Secret(); err != nil || string(s) != "s" {
		t.Fatalf("secret %q, %v", s, err)
	}
	if c.RedisSecurity.TLS.Enabled || c.KafkaSecurity.SASLMechanism != "" || c.CassandraSecurity.Username != "" {
		t.Fatalf("the components are reached in plaintext without credentials unless told: %+v", c)
	}
	if c.MaxDeliveries != 5 || c.HostRate != 0 || c.BreakerFailures != 20 || c.BreakerCooldown.Seconds() != 30 || c.AllowTargetAddrs != "" {
		t.Fatalf("failure-handling defaults %+v", c)
	}
	c, err = load(t, nil, map[string]string{"SUNDIAL_SIGNING_SECRET": "s", "SUNDIAL_ALLOW_TARGET_ADDRS": "127.0.0.1, [::1]:8099"})
	if err != nil || c.AllowTargetAddrs != "127.0.0.1, [::1]:8099" {
		t.Fatalf("allowlist from the environment: %q %v", c.AllowTargetAddrs, err)
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--executors", "0"}, "executors"},
		{[]string{"--instance-id", "worker/1"}, "instance-id"},
		{[]string{"--procs", "0"}, "procs"},
		{[]string{"--procs", "many"}, "procs"},
		{[]string{"--critical-executors", "-1"}, "critical-executors"},
		{[]string{"--low-executors-percent", "0"}, "low-executors-percent"},
		{[]string{"--high-executors-percent", "101"}, "high-executors-percent"},
		{[]string{"--medium-executors-percent", "95"}, "medium-executors-percent"},
		{[]string{"--low-executors-percent", "85"}, "low-executors-percent"},
		{[]string{"--medium-held-percent", "0"}, "medium-held-percent"},
		{[]string{"--low-held-percent", "90"}, "low-held-percent"},
		{[]string{"--prepare-grain", "2s"}, "prepare-grain"},
		{[]string{"--ledger-spill-after", "0s"}, "ledger-spill-after"},
		{[]string{"--lease-ttl", "1ms"}, "lease-ttl"},
		{[]string{"--lag-interval", "100ms"}, "lag-interval"},
		{[]string{"--session-timeout", "10ms"}, "session-timeout"},
		{[]string{"--kafka-brokers", " , "}, "kafka-brokers"},
		{[]string{"--signing-secret-file", "/x"}, "signing-secret"},
		{[]string{"--group", ""}, "group"},
		{[]string{"--allow-target-addrs", "sink.internal:8099"}, "allow-target-addrs"},
		{[]string{"--deny-target-addrs", "10.0.0.0/99"}, "deny-target-addrs"},
		{[]string{"--max-deliveries", "-1"}, "max-deliveries"},
		{[]string{"--redis-addr", "127.0.0.1"}, "redis-addr"},
		{[]string{"--redis-addr", " , "}, "redis-addr"},
		{[]string{"--host-rate", "-3"}, "host-rate"},
		{[]string{"--host-rate", "5", "--host-burst", "0"}, "host-burst"},
		{[]string{"--breaker-failures", "-1"}, "breaker-failures"},
		{[]string{"--secrets-dir", "/nonexistent/secrets"}, "secrets-dir"},
		{[]string{"--signing-key-encryption-key-file", "/nonexistent/kek"}, "signing-key-encryption-key-file"},
		{[]string{"--signing-key-encryption-key-file", "config_test.go", "--postgres-dsn", ""}, "signing-key-encryption-key-file"},
		{[]string{"--signing-key-refresh", "-1s"}, "signing-key-refresh"},
		{[]string{"--signing-secret", "", "--platform-signature-until", "2026-12-31T00:00:00Z"}, "platform-signature-until"},
		{[]string{"--metrics-job-ids", "0192a3b4-c5d6-7e8f-9a0b-1c2d3e4f5a6b,nightly-report"}, "metrics-job-ids"},
		// The components' TLS and credentials (the Security of lease,
		// kafkaconn and ledger) are validated with the rest.
		{[]string{"--redis-username", "app"}, "redis-password"},
		{[]string{"--kafka-sasl-mechanism", "PLAIN"}, "kafka-sasl-username"},
		{[]string{"--cassandra-tls-ca-file", "/x"}, "cassandra-tls-ca-file"},
	} {
		args := append([]string{"--signing-secret", "s"}, tc.args...)
		if _, err := load(t, args, nil); err == nil || !strings.Contains(err.Error(), tc.flag+":") {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.flag)
		}
	}
}

// Several --redis-addr are a Redis Cluster's nodes, with the liveness key
// on as on one node.
func TestRedisClusterAddrs(t *testing.T) {
	c, err := load(t, []string{"--signing-secret", "s", "--redis-addr", "127.0.0.1:7101, 127.0.0.1:7102"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.LivenessTTL <= 0 {
		t.Errorf("liveness TTL %s on a cluster, want the default", c.LivenessTTL)
	}
	if addrs, err := lease.ParseAddrs(c.RedisAddr); err != nil || len(addrs) != 2 || addrs[1] != "127.0.0.1:7102" {
		t.Fatalf("cluster addresses %q: %v, %v", c.RedisAddr, addrs, err)
	}
}

// The watched jobs are none by default; given, they come back in the form
// firings carry job ids, once each, however the operator wrote them.
func TestWatchedJobs(t *testing.T) {
	c, err := load(t, []string{"--signing-secret", "s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := c.WatchedJobs(); err != nil || len(ids) != 0 {
		t.Fatalf("default watched jobs %v, %v", ids, err)
	}
	c, err = load(t, nil, map[string]string{
		"SUNDIAL_SIGNING_SECRET":  "s",
		"SUNDIAL_METRICS_JOB_IDS": " 0192A3B4-C5D6-7E8F-9A0B-1C2D3E4F5A6B, 0192a3b4-c5d6-7e8f-9a0b-1c2d3e4f5a6b,,{0192a3b4-c5d6-7e8f-9a0b-000000000000}",
	})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := c.WatchedJobs()
	if err != nil || strings.Join(ids, ",") != "0192a3b4-c5d6-7e8f-9a0b-1c2d3e4f5a6b,0192a3b4-c5d6-7e8f-9a0b-000000000000" {
		t.Fatalf("watched jobs %v, %v", ids, err)
	}
}

func TestSecretFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := load(t, []string{"--signing-secret-file", path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := c.Secret(); err != nil || string(s) != "from-file" {
		t.Fatalf("secret %q, %v", s, err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	_ = os.WriteFile(empty, nil, 0o600)
	c.SigningSecretFile = empty
	if _, err := c.Secret(); err == nil {
		t.Fatal("empty secret file accepted")
	}
}

// --procs auto and a number are accepted; so is an empty Procs (a worker
// built in a test process leaves GOMAXPROCS alone).
func TestProcsSettingAccepted(t *testing.T) {
	for _, procs := range []string{"auto", "", "1", "4"} {
		fs := flag.NewFlagSet("worker", flag.ContinueOnError)
		var c Config
		c.Register(fs)
		if err := fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		c.Procs = procs
		var p config.Problems
		c.Validate(&p)
		if err := p.Err(); err != nil && strings.Contains(err.Error(), "procs") {
			t.Errorf("--procs %q refused: %v", procs, err)
		}
	}
}

// The limits' flags: the cluster by default, the tenants' firing rates
// from the flags and the api's quotas file, bad values named.
func TestLimitsFlagsAndQuotasFile(t *testing.T) {
	c, err := load(t, nil, map[string]string{"SUNDIAL_SIGNING_SECRET": "s"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.ClusterLimits || c.HostConcurrency != 0 || c.TenantFiringRate != 0 {
		t.Fatalf("limits defaults: cluster %v, host concurrency %d, tenant rate %g", c.ClusterLimits, c.HostConcurrency, c.TenantFiringRate)
	}
	file := filepath.Join(t.TempDir(), "quotas.yaml")
	if err := os.WriteFile(file, []byte("defaults:\n  max_jobs: 10\ntenants:\n  acme:\n    min_interval: 1m\n    firing_rate_per_second: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = load(t, []string{"--quotas-file", file, "--tenant-firing-rate", "50", "--tenant-firing-burst", "3"}, map[string]string{"SUNDIAL_SIGNING_SECRET": "s"})
	if err != nil {
		t.Fatal(err)
	}
	rates, err := c.Quotas()
	if err != nil {
		t.Fatal(err)
	}
	if a, o := rates.For("acme").Firing, rates.For("other").Firing; a.Rate != 5 || a.Burst != 3 || o.Rate != 50 {
		t.Fatalf("acme %+v, other %+v", a, o)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("tenants:\n  acme:\n    firing_rate_per_second: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--host-concurrency", "-1"}, "host-concurrency"},
		{[]string{"--tenant-firing-rate", "-2"}, "tenant-firing-rate"},
		{[]string{"--limits-timeout", "0s"}, "limits-timeout"},
		{[]string{"--quotas-file", bad}, "quotas-file"},
		{[]string{"--quotas-file", filepath.Join(t.TempDir(), "missing.yaml")}, "quotas-file"},
	} {
		_, err := load(t, tc.args, map[string]string{"SUNDIAL_SIGNING_SECRET": "s"})
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.flag)
		}
	}
}

// Two workers on one host (make run WORKERS=2) get distinct static member
// ids from their admin ports, and a restart of one gets the same id again.
func TestInstanceIDFromTheAdminPort(t *testing.T) {
	id := func(admin string, args ...string) string {
		t.Helper()
		fs := flag.NewFlagSet("worker", flag.ContinueOnError)
		fs.String("admin-addr", admin, "")
		var c Config
		c.Register(fs)
		if err := config.Load(fs, append([]string{"--signing-key-encryption-key-file", kekFile(t)}, args...), func(string) (string, bool) { return "", false }); err != nil {
			t.Fatal(err)
		}
		var p config.Problems
		c.Validate(&p)
		if err := p.Err(); err != nil {
			t.Fatal(err)
		}
		return c.GroupInstanceID()
	}
	first, second := id("127.0.0.1:8084"), id("127.0.0.1:8184")
	if first == second || !strings.HasSuffix(first, "-8084") {
		t.Fatalf("ids %q and %q: want distinct, ending in the admin port", first, second)
	}
	if again := id("127.0.0.1:8084"); again != first {
		t.Fatalf("restart: %q, want %q", again, first)
	}
	if got := id("127.0.0.1:8084", "--instance-id", "w-7"); got != "w-7" {
		t.Fatalf("explicit id: %q", got)
	}
	if got := id("127.0.0.1:8084", "--instance-id", ""); got != "" {
		t.Fatalf("dynamic: %q, want empty", got)
	}
	// Two workers on one host with admin port 0 would share an id: the
	// worker id names each.
	if a, b := id("127.0.0.1:0", "--worker-id", "proc-a"), id("127.0.0.1:0", "--worker-id", "proc-b"); a != "proc-a" || b != "proc-b" {
		t.Fatalf("admin port 0: ids %q and %q, want the worker ids", a, b)
	}
}

// --platform-signature-until takes an RFC 3339 instant (from the flag or
// SUNDIAL_PLATFORM_SIGNATURE_UNTIL) and needs the platform's secret; any
// other value is refused, naming the flag.
func TestPlatformSignatureUntil(t *testing.T) {
	c, err := load(t, []string{"--signing-secret", "s"}, map[string]string{"SUNDIAL_PLATFORM_SIGNATURE_UNTIL": "2026-12-31T00:00:00Z"})
	if err != nil || !c.PlatformSignatureUntil.Equal(time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("until %s, %v", c.PlatformSignatureUntil, err)
	}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var bad Config
	bad.Register(fs)
	err = config.Load(fs, []string{"--platform-signature-until", "next week"}, func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), "platform-signature-until") {
		t.Fatalf("a value that is no instant: %v", err)
	}
}
