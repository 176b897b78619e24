//go:build integration

package main_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/signature"
	"github.com/sundialhq/sundial/pkg/signingkey"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/worker/internal/app"
)

// signedRequest is what the key-checking target received.
type signedRequest struct {
	header, exec string
	body         []byte
	received     time.Time
}

// keyTarget is an HTTP target that keeps every request's signature
// header, to check against the keys a tenant holds.
type keyTarget struct {
	srv *httptest.Server
	mu  sync.Mutex
	got map[string]signedRequest // by execution id
}

func newKeyTarget(t *testing.T) *keyTarget {
	k := &keyTarget{got: map[string]signedRequest{}}
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		exec := r.Header.Get(firing.HeaderExecutionID)
		k.mu.Lock()
		k.got[exec] = signedRequest{header: r.Header.Get(firing.HeaderSignature), exec: exec, body: body, received: time.Now()}
		k.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(k.srv.Close)
	return k
}

func (k *keyTarget) wait(t *testing.T, exec string) signedRequest {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		k.mu.Lock()
		r, ok := k.got[exec]
		k.mu.Unlock()
		if ok {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("execution %s never reached the target", exec)
	return signedRequest{}
}

// verify checks r against the keys a target holds.
func (r signedRequest) verify(keys ...signingkey.Key) error {
	var ks []signature.Key
	for _, k := range keys {
		ks = append(ks, signature.Key{ID: k.ID, Secret: k.Secret})
	}
	return signature.VerifyKeys(ks, r.header, r.exec, r.body, r.received, time.Minute)
}

// A worker with --signing-key-encryption-key-file signs each tenant's
// requests with that tenant's keys from real Postgres, naming them: a
// target holding its tenant's key verifies; the platform secret and
// another tenant's key do not. A tenant without keys is signed for with
// the platform secret, as before; a tenant whose first key is within its
// platform overlap is signed for with both, so its targets can move from
// the platform secret to the key. After a rotation with an overlap a
// request carries both keys' signatures, so a target holding either
// passes; after a rotation without one, only the new key's.
func TestSigningWithTenantKeys(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	kekFile := filepath.Join(t.TempDir(), "kek")
	if err := os.WriteFile(kekFile, []byte(strings.Repeat("q", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kek, err := signingkey.LoadKEK(kekFile)
	if err != nil {
		t.Fatal(err)
	}
	keys := signingkey.NewStore(e.pg, kek)
	k1, err := keys.Create(ctx, "acme", "acme/ops", 0)
	if err != nil {
		t.Fatal(err)
	}
	initech, err := keys.Create(ctx, "initech", "initech/ops", time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	target := newKeyTarget(t)
	cfg := e.config("w1")
	cfg.AllowTargetAddrs = target.srv.Listener.Addr().String()
	cfg.SigningKEKFile = kekFile
	cfg.SigningKeyRefresh = 200 * time.Millisecond
	e.startInProcessWith(cfg, app.Deps{})

	fire := func(tenant string) signedRequest {
		t.Helper()
		f := e.firing(uuid.Must(uuid.NewV7()), time.Now().Add(1500*time.Millisecond), sundialv1.Priority_PRIORITY_HIGH)
		f.Tenant = tenant
		f.Target.GetHttp().Url = target.srv.URL + "/hook"
		e.produce([]*sundialv1.Firing{f}, nil)
		return target.wait(t, f.GetExecutionId())
	}

	r := fire("acme")
	if !strings.Contains(r.header, "kid="+k1.ID+",v1=") || strings.Count(r.header, "v1=") != 1 {
		t.Fatalf("acme's request: %q", r.header)
	}
	if err := r.verify(k1); err != nil {
		t.Fatalf("acme's key: %v", err)
	}
	if err := signature.Verify(e.secret, r.header, r.exec, r.body, r.received, time.Minute); !errors.Is(err, signature.ErrMismatch) {
		t.Fatalf("the platform secret verifies acme's request: %v", err)
	}
	if err := r.verify(initech); !errors.Is(err, signature.ErrUnknownKey) {
		t.Fatalf("another tenant's key verifies acme's request: %v", err)
	}
	if err := signature.Verify(initech.Secret, r.header, r.exec, r.body, r.received, time.Minute); !errors.Is(err, signature.ErrMismatch) {
		t.Fatalf("another tenant's secret verifies acme's request: %v", err)
	}
	g := fire("globex") // no keys: the platform secret, unnamed
	if strings.Contains(g.header, "kid=") || signature.Verify(e.secret, g.header, g.exec, g.body, g.received, time.Minute) != nil {
		t.Fatalf("globex's request: %q", g.header)
	}
	// initech's first key is within its platform overlap: a target still
	// on the platform secret and one already on the key both pass.
	i := fire("initech")
	if err := i.verify(initech); err != nil {
		t.Fatalf("initech's key: %v (%q)", err, i.header)
	}
	if err := signature.Verify(e.secret, i.header, i.exec, i.body, i.received, time.Minute); err != nil {
		t.Fatalf("the platform secret within initech's platform overlap: %v (%q)", err, i.header)
	}

	// Rotation with an overlap: both keys sign, the new one first.
	k2, prev, err := keys.Rotate(ctx, "acme", "acme/ops", time.Hour)
	if err != nil || prev.ID != k1.ID {
		t.Fatal(err)
	}
	r = fire("acme")
	if !strings.HasPrefix(r.header, "t=") || !strings.Contains(r.header, "kid="+k2.ID) || strings.Index(r.header, "kid="+k2.ID) > strings.Index(r.header, "kid="+k1.ID) {
		t.Fatalf("during the overlap: %q", r.header)
	}
	for _, k := range []signingkey.Key{k1, k2} {
		if err := r.verify(k); err != nil {
			t.Fatalf("during the overlap, with %s: %v", k.ID, err)
		}
		if err := signature.Verify(k.Secret, r.header, r.exec, r.body, r.received, time.Minute); err != nil {
			t.Fatalf("during the overlap, Verify with %s: %v", k.ID, err)
		}
	}

	// Rotation without an overlap (a leaked key): only the new key signs.
	k3, _, err := keys.Rotate(ctx, "acme", "acme/ops", 0)
	if err != nil {
		t.Fatal(err)
	}
	r = fire("acme")
	if err := r.verify(k3); err != nil {
		t.Fatalf("after a rotation without overlap, with the new key: %v (%q)", err, r.header)
	}
	for _, old := range []signingkey.Key{k1, k2} {
		if err := r.verify(old); err == nil || strings.Contains(r.header, old.ID) {
			t.Fatalf("the retired key %s still signs: %q", old.ID, r.header)
		}
	}

	// Nothing secret reached the worker's log.
	logs := e.logs.String()
	for _, s := range [][]byte{k1.Secret, k2.Secret, k3.Secret, initech.Secret, e.secret} {
		if strings.Contains(logs, string(s)) {
			t.Fatalf("a signing secret reached the worker's log")
		}
	}
}
