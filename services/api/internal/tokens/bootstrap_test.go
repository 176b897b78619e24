package tokens

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hashLine is a tokens-file line for token.
func hashLine(t *testing.T, token, principal string) string {
	t.Helper()
	h, err := auth.HashToken(token, auth.BootstrapHashParams)
	require.NoError(t, err)
	return "'" + h + "': " + principal + "\n"
}

func TestParseBootstrap(t *testing.T) {
	a, b := hashLine(t, "sdb_a", "acme:ops"), hashLine(t, "sdb_b", "{tenant: platform, name: oncall, role: operator}")
	set, err := ParseBootstrap("f.yaml", []byte("# bootstrap tokens\n"+a+b))
	require.NoError(t, err)
	require.Equal(t, 2, set.Len())
	require.Equal(t, []string{"acme", "platform"}, set.Tenants())
	require.Equal(t, auth.Principal{Tenant: "platform", Actor: "platform/oncall", Role: auth.RoleOperator}, set.entries[1].p)
	require.Equal(t, 3, set.entries[1].line)

	empty, err := ParseBootstrap("f.yaml", nil)
	require.NoError(t, err)
	require.Zero(t, empty.Len())

	for name, tc := range map[string]struct{ body, want string }{
		"plain token": {a + "tok-plain-secret: acme\n",
			"tokens file f.yaml line 2: the key is a plain token, not an argon2id hash; plain tokens are refused"},
		"bad principal":  {a + strings.Replace(b, "{tenant: platform, name: oncall, role: operator}", "acme:ops:boss", 1), "tokens file f.yaml line 2: auth: principal"},
		"not a map":      {"- x\n- y\n", "tokens file f.yaml line 1: must be a map"},
		"not yaml":       {a + "x: [\n", "tokens file f.yaml line"},
		"same hash":      {a + a, "tokens file f.yaml"},
		"broken hash":    {"'$argon2id$v=19$m=4096,t=2,p=1$AAAA': acme\n", "tokens file f.yaml line 1: not an argon2id hash"},
		"costly hash":    {"'$argon2id$v=19$m=4194304,t=2,p=1$c2FsdHNhbHQ$c2FsdHNhbHRzYWx0c2FsdA': acme\n", "line 1: argon2id parameters m=4194304"},
		"mapping no ten": {"'" + strings.TrimSuffix(strings.SplitN(a, "'", 3)[1], "") + "': {name: x}\n", "line 1: a principal mapping needs tenant"},
	} {
		_, err := ParseBootstrap("f.yaml", []byte(tc.body))
		require.Error(t, err, name)
		require.Contains(t, err.Error(), tc.want, name)
		require.NotContains(t, err.Error(), "tok-plain-secret", name)
	}
	_, err = ParseBootstrap("f.yaml", []byte(a+"tok-plain-secret: acme\n"))
	require.Contains(t, err.Error(), "schedctl token hash")
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The file is polled on the clock: an added token works and a removed
// one stops after a poll; a malformed edit is logged with its line and
// the old set stays.
func TestBootstrapReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	write := func(body string) { require.NoError(t, os.WriteFile(path, []byte(body), 0o600)) }
	a, b := hashLine(t, "sdb_a", "acme:ops"), hashLine(t, "sdb_b", "globex")
	write(a)
	set, err := LoadBootstrap(path)
	require.NoError(t, err)
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	logs := &syncBuf{}
	boot, err := NewBootstrap(BootstrapConfig{Initial: set, Clock: clk, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	require.NoError(t, boot.Start(context.Background()))
	defer boot.Stop()
	ctx := context.Background()
	works := func(token string) bool {
		_, ok, err := boot.Verify(ctx, token)
		require.NoError(t, err)
		return ok
	}
	p, ok, err := boot.Verify(ctx, "sdb_a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, auth.Principal{Tenant: "acme", Actor: "acme/ops", Role: auth.RoleAdmin}, p)
	require.False(t, works("sdb_b"))
	require.False(t, works("sdl_0123456789abcdef_x"), "api-made tokens are not the bootstrap's")
	// poll ticks the fake clock until the loop read the file again.
	poll := func(cond func() bool) {
		require.Eventually(t, func() bool {
			clk.Advance(DefaultPollInterval)
			return cond()
		}, 5*time.Second, 10*time.Millisecond)
	}

	write(b) // a removed, b added (b was refused a moment ago: not cached)
	poll(func() bool { return works("sdb_b") })
	require.False(t, works("sdb_a"))
	p, _, _ = boot.Verify(ctx, "sdb_b")
	require.Equal(t, "globex/token:"+auth.Fingerprint("sdb_b"), p.Actor)

	write(b + "tok-plain: acme\n")
	poll(func() bool { return strings.Contains(logs.String(), "tokens file changed but is refused") })
	require.Contains(t, logs.String(), "line 2: the key is a plain token")
	require.NotContains(t, logs.String(), "tok-plain:")
	require.True(t, works("sdb_b"), "the old set stays")
	require.Equal(t, 1, boot.Set().Len())

	write("")
	poll(func() bool { return !works("sdb_b") })
	require.Zero(t, boot.Set().Len())
}

// A verified token is remembered: later calls take no argon2id check.
func TestBootstrapCaches(t *testing.T) {
	set, err := ParseBootstrap("f.yaml", []byte(hashLine(t, "sdb_a", "acme")))
	require.NoError(t, err)
	boot, err := NewBootstrap(BootstrapConfig{Initial: set})
	require.NoError(t, err)
	_, ok, _ := boot.Verify(context.Background(), "sdb_a")
	require.True(t, ok)
	t0 := time.Now()
	for range 1000 {
		if _, ok, _ := boot.Verify(context.Background(), "sdb_a"); !ok {
			t.Fatal("cached token refused")
		}
	}
	// 1,000 argon2id checks would take seconds.
	require.Less(t, time.Since(t0), 500*time.Millisecond)
}
