package signing

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/signature"
	"github.com/sundialhq/sundial/pkg/signingkey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// keys is a Source answering what it holds, or err.
type keys struct {
	mu    sync.Mutex
	m     map[string][]signingkey.Key
	bad   []signingkey.Unopened
	err   error
	calls int
}

func (k *keys) Valid(context.Context) (map[string][]signingkey.Key, []signingkey.Unopened, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls++
	if k.err != nil {
		return nil, nil, k.err
	}
	return k.m, k.bad, nil
}

var t0 = time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC)

func TestKeyringSignsWithTheTenantsKeys(t *testing.T) {
	platform := []byte("platform-secret")
	cur := signingkey.Key{Tenant: "acme", ID: "k-cur", Secret: []byte("sdk_cur")}
	prev := signingkey.Key{Tenant: "acme", ID: "k-prev", Secret: []byte("sdk_prev"), ExpiresAt: t0.Add(time.Hour)}
	src := &keys{m: map[string][]signingkey.Key{"acme": {cur, prev}}, bad: []signingkey.Unopened{{Tenant: "initech", ID: "k-x"}}}
	var logs bytes.Buffer
	k := New(platform, src, time.Second, clock.NewFake(t0), slog.New(slog.NewTextHandler(&logs, nil)))

	// Before any load: the platform secret, exactly as before.
	if got, want := k.Sign("acme", t0, "e1", []byte("b")), signature.Sign(platform, t0, "e1", []byte("b")); got != want {
		t.Fatalf("before loading: %q, want %q", got, want)
	}
	if err := k.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := k.Sign("acme", t0, "e1", []byte("b"))
	if !strings.Contains(h, "kid=k-cur,v1=") || !strings.Contains(h, "kid=k-prev,v1=") || strings.Index(h, "k-cur") > strings.Index(h, "k-prev") {
		t.Fatalf("during the overlap: %q", h)
	}
	for _, key := range []signingkey.Key{cur, prev} {
		if err := signature.VerifyKeys([]signature.Key{{ID: key.ID, Secret: key.Secret}}, h, "e1", []byte("b"), t0, time.Minute); err != nil {
			t.Errorf("%s: %v", key.ID, err)
		}
	}
	if err := signature.Verify(platform, h, "e1", []byte("b"), t0, time.Minute); !errors.Is(err, signature.ErrMismatch) {
		t.Fatalf("a tenant with keys is still signed for with the platform secret: %v", err)
	}
	// The previous key ends at its expiry, without a refresh.
	h = k.Sign("acme", t0.Add(time.Hour), "e1", []byte("b"))
	if strings.Contains(h, "k-prev") || !strings.Contains(h, "kid=k-cur") {
		t.Fatalf("after the overlap: %q", h)
	}
	// A first key within its platform overlap: the platform secret signs
	// too, unnamed and last, until the overlap ends.
	first := signingkey.Key{Tenant: "initech", ID: "k-first", Secret: []byte("sdk_first"), PlatformUntil: t0.Add(time.Hour)}
	src.mu.Lock()
	src.m = map[string][]signingkey.Key{"acme": {cur, prev}, "initech": {first}}
	src.mu.Unlock()
	if err := k.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	h = k.Sign("initech", t0, "e1", []byte("b"))
	if !strings.HasPrefix(h, "t=") || !strings.Contains(h, "kid=k-first,v1=") || strings.Count(h, "v1=") != 2 ||
		signature.Verify(platform, h, "e1", []byte("b"), t0, time.Minute) != nil ||
		signature.VerifyKeys([]signature.Key{{ID: first.ID, Secret: first.Secret}}, h, "e1", []byte("b"), t0, time.Minute) != nil {
		t.Fatalf("within the platform overlap: %q", h)
	}
	if h := k.Sign("initech", t0.Add(time.Hour), "e1", []byte("b")); strings.Count(h, "v1=") != 1 || signature.Verify(platform, h, "e1", []byte("b"), t0.Add(time.Hour), time.Minute) == nil {
		t.Fatalf("after the platform overlap: %q", h)
	}
	// Another tenant has no keys: the platform secret.
	if got, want := k.Sign("globex", t0, "e1", []byte("b")), signature.Sign(platform, t0, "e1", []byte("b")); got != want {
		t.Fatalf("globex: %q", got)
	}
	// A key that does not open is named once, its tenant falls back.
	if err := k.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "does not open"); n != 1 || !strings.Contains(logs.String(), "k-x") {
		t.Fatalf("unopened key logged %d times:\n%s", n, logs.String())
	}
	for _, s := range []string{"sdk_cur", "sdk_prev", "platform-secret"} {
		if strings.Contains(logs.String(), s) {
			t.Fatalf("a secret reached the log:\n%s", logs.String())
		}
	}
	// Postgres gone: the keys held keep signing.
	src.mu.Lock()
	src.err = errors.New("connection refused")
	src.mu.Unlock()
	if err := k.Refresh(context.Background()); err == nil {
		t.Fatal("no error")
	}
	if h := k.Sign("acme", t0, "e1", []byte("b")); !strings.Contains(h, "kid=k-cur") {
		t.Fatalf("after a failed refresh: %q", h)
	}
}

// Start loads at once and then every refresh interval; Stop ends it.
func TestKeyringRefreshes(t *testing.T) {
	clk := clock.NewFake(t0)
	src := &keys{m: map[string][]signingkey.Key{}}
	k := New([]byte("p"), src, 5*time.Second, clk, nil)
	if err := k.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	src.mu.Lock()
	src.m = map[string][]signingkey.Key{"acme": {{Tenant: "acme", ID: "k1", Secret: []byte("s")}}}
	src.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for len(k.Tenants()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("never refreshed")
		}
		clk.Advance(5 * time.Second)
		time.Sleep(time.Millisecond) // let the loop take the timer's tick
	}
	k.Stop()
	k.Stop()
	New(nil, nil, 0, nil, nil).Stop() // stoppable before start
}
