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

	"github.com/sundialhq/sundial/pkg/domain/signature"
	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	"github.com/sundialhq/sundial/pkg/process/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// keys is a Source answering what it holds, or err; Ensure answers a
// tenant's keys, making one for a tenant it lacks (as the store does).
type keys struct {
	mu      sync.Mutex
	m       map[string][]signingkey.Key
	bad     []signingkey.Unopened
	err     error
	calls   int
	ensured []string
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

func (k *keys) Ensure(_ context.Context, tenant, actor string) ([]signingkey.Key, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ensured = append(k.ensured, tenant+"/"+actor)
	if k.err != nil {
		return nil, k.err
	}
	if len(k.m[tenant]) == 0 {
		k.m[tenant] = []signingkey.Key{{Tenant: tenant, ID: "k-made-" + tenant, Secret: []byte("sdk_made_" + tenant)}}
	}
	return k.m[tenant], nil
}

var t0 = time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC)

func verifies(key signingkey.Key, h string, ts time.Time) bool {
	return signature.VerifyKeys([]signature.Key{{ID: key.ID, Secret: key.Secret}}, h, "e1", []byte("b"), ts, time.Minute) == nil
}

// A tenant's requests are signed with its keys only: during a rotation's
// overlap its current and previous key, each named, the current first;
// after, the current one. The platform's secret signs nothing.
func TestKeyringSignsWithTheTenantsKeysOnly(t *testing.T) {
	cur := signingkey.Key{Tenant: "acme", ID: "k-cur", Secret: []byte("sdk_cur")}
	prev := signingkey.Key{Tenant: "acme", ID: "k-prev", Secret: []byte("sdk_prev"), ExpiresAt: t0.Add(time.Hour)}
	src := &keys{m: map[string][]signingkey.Key{"acme": {cur, prev}}, bad: []signingkey.Unopened{{Tenant: "initech", ID: "k-x"}}}
	var logs bytes.Buffer
	k := New(src, time.Second, clock.NewFake(t0), slog.New(slog.NewTextHandler(&logs, nil)))
	if err := k.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := k.Sign("acme", t0, "e1", []byte("b"))
	if strings.Count(h, "v1=") != 2 || !strings.HasPrefix(h, "t=") || !strings.Contains(h, ",kid=k-cur,v1=") ||
		!strings.Contains(h, ",kid=k-prev,v1=") || strings.Index(h, "k-cur") > strings.Index(h, "k-prev") {
		t.Fatalf("during the overlap: %q", h)
	}
	for _, key := range []signingkey.Key{cur, prev} {
		if !verifies(key, h, t0) {
			t.Errorf("%s does not verify %q", key.ID, h)
		}
	}
	// The previous key ends at its expiry, without a refresh.
	h = k.Sign("acme", t0.Add(time.Hour), "e1", []byte("b"))
	if strings.Count(h, "v1=") != 1 || !strings.Contains(h, "kid=k-cur,v1=") || !verifies(cur, h, t0.Add(time.Hour)) {
		t.Fatalf("after the overlap: %q", h)
	}
	// A key that does not open is named once, never its value.
	if err := k.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "does not open"); n != 1 || !strings.Contains(logs.String(), "k-x") {
		t.Fatalf("unopened key logged %d times:\n%s", n, logs.String())
	}
	// Postgres gone: the keys held keep signing.
	src.mu.Lock()
	src.err = errors.New("connection refused")
	src.mu.Unlock()
	if err := k.Refresh(context.Background()); err == nil {
		t.Fatal("no error")
	}
	if h := k.Sign("acme", t0, "e1", []byte("b")); !verifies(cur, h, t0) {
		t.Fatalf("after a failed refresh: %q", h)
	}
	for _, s := range []string{"sdk_cur", "sdk_prev"} {
		if strings.Contains(logs.String(), s) {
			t.Fatalf("a secret reached the log:\n%s", logs.String())
		}
	}
}

// A tenant the keyring holds no key of is asked for at its first request
// (once, however many wait), its key made if it has none; while its keys
// cannot be had, its requests carry no signature, which is logged once.
func TestKeyringAsksForATenantItLacks(t *testing.T) {
	src := &keys{m: map[string][]signingkey.Key{}}
	var logs bytes.Buffer
	clk := clock.NewFake(t0)
	k := New(src, time.Second, clk, slog.New(slog.NewTextHandler(&logs, nil)))
	// Never loaded (Postgres down at start), then down for the ask.
	src.err = errors.New("connection refused")
	for range 3 {
		if h := k.Sign("globex", t0, "e1", []byte("b")); strings.Contains(h, "v1=") {
			t.Fatalf("signed without a key: %q", h)
		}
	}
	if n := strings.Count(logs.String(), "no signing key for the tenant"); n != 1 {
		t.Fatalf("logged %d times:\n%s", n, logs.String())
	}
	src.mu.Lock()
	asked := len(src.ensured)
	src.err, src.ensured = nil, nil
	src.mu.Unlock()
	if asked != 1 {
		t.Fatalf("asked %d times within one refresh interval, want 1", asked)
	}
	// Within the interval it is not asked for again, even now it would
	// answer; after it, it is.
	if h := k.Sign("globex", t0, "e1", []byte("b")); strings.Contains(h, "v1=") {
		t.Fatalf("asked again within the interval: %q", h)
	}
	clk.Advance(time.Second)
	var wg sync.WaitGroup
	hs := make([]string, 8)
	for i := range hs {
		wg.Go(func() { hs[i] = k.Sign("globex", t0, "e1", []byte("b")) })
	}
	wg.Wait()
	made := signingkey.Key{ID: "k-made-globex", Secret: []byte("sdk_made_globex")}
	for _, h := range hs {
		if strings.Count(h, "v1=") != 1 || !verifies(made, h, t0) {
			t.Fatalf("after the ask: %q", h)
		}
	}
	src.mu.Lock()
	ensured := src.ensured
	src.mu.Unlock()
	if len(ensured) != 1 || ensured[0] != "globex/"+Actor {
		t.Fatalf("asked %v, want once for globex by %s", ensured, Actor)
	}
	if !strings.Contains(logs.String(), "had again") || strings.Contains(logs.String(), "sdk_made") {
		t.Fatalf("recovery not logged, or a secret logged:\n%s", logs.String())
	}
}

// With the migration flag the platform's secret signs too, unnamed and
// last, before the instant it names, and never from it on; a rotation's
// overlap still names the tenant's two keys only.
func TestKeyringPlatformSignatureUntil(t *testing.T) {
	platform := []byte("platform-secret")
	until := t0.Add(2 * time.Hour)
	cur := signingkey.Key{Tenant: "acme", ID: "k-cur", Secret: []byte("sdk_cur")}
	prev := signingkey.Key{Tenant: "acme", ID: "k-prev", Secret: []byte("sdk_prev"), ExpiresAt: t0.Add(time.Hour)}
	src := &keys{m: map[string][]signingkey.Key{"acme": {cur, prev}}}
	clk := clock.NewFake(t0)
	k := New(src, time.Second, clk, nil, WithPlatformSignature(platform, until))
	if err := k.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	platformSigned := func(h string, ts time.Time) bool {
		// Verify tries every v1: one by the platform secret passes.
		return signature.Verify(platform, h, "e1", []byte("b"), ts, time.Minute) == nil
	}
	h := k.Sign("acme", clk.Now(), "e1", []byte("b"))
	if strings.Count(h, "v1=") != 3 || !platformSigned(h, clk.Now()) || !verifies(cur, h, clk.Now()) || !verifies(prev, h, clk.Now()) ||
		strings.LastIndex(h, "kid=") > strings.LastIndex(h, ",v1=") {
		t.Fatalf("before the end, in a rotation's overlap: %q", h)
	}
	clk.Advance(time.Hour)
	if h := k.Sign("acme", clk.Now(), "e1", []byte("b")); strings.Count(h, "v1=") != 2 || !platformSigned(h, clk.Now()) || !verifies(cur, h, clk.Now()) {
		t.Fatalf("before the end, after the overlap: %q", h)
	}
	clk.Advance(time.Hour - time.Second)
	if h := k.Sign("acme", clk.Now(), "e1", []byte("b")); !platformSigned(h, clk.Now()) {
		t.Fatalf("a second before the end: %q", h)
	}
	clk.Advance(time.Second)
	h = k.Sign("acme", clk.Now(), "e1", []byte("b"))
	if strings.Count(h, "v1=") != 1 || platformSigned(h, clk.Now()) || !verifies(cur, h, clk.Now()) {
		t.Fatalf("at the end: %q", h)
	}
	if err := signature.Verify(platform, h, "e1", []byte("b"), clk.Now(), time.Minute); !errors.Is(err, signature.ErrMismatch) {
		t.Fatalf("the platform secret verifies after the end: %v", err)
	}
	// Without the flag (or without a secret) it never signs.
	for _, o := range []Option{WithPlatformSignature(platform, time.Time{}), WithPlatformSignature(nil, until)} {
		k := New(src, time.Second, clk, nil, o)
		if h := k.Sign("acme", t0, "e1", []byte("b")); platformSigned(h, t0) || strings.Count(h, "v1=") != 2 {
			t.Fatalf("without the migration: %q", h)
		}
	}
}

// Start loads at once and then every refresh interval; Stop ends it.
func TestKeyringRefreshes(t *testing.T) {
	clk := clock.NewFake(t0)
	src := &keys{m: map[string][]signingkey.Key{}}
	k := New(src, 5*time.Second, clk, nil)
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
	New(nil, 0, nil, nil).Stop() // stoppable before start
}
