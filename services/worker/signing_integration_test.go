//go:build integration

package main_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/signature"
	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
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

// A worker signs each tenant's requests with that tenant's own keys from
// real Postgres, naming them, and with nothing else: a target holding its
// tenant's key verifies; another tenant's key does not, and no platform
// signature rides along. A tenant whose first job the api just made a key
// for (in the job's transaction, long before the worker's next refresh)
// is signed with that key at its first firing: the worker asks for it. A
// tenant with firings but no key (jobs from before per-tenant keys) gets
// one made by the worker. After a rotation with an overlap a request
// carries the previous and the new key's signatures, and nothing else;
// after a rotation without one, only the new key's.
func TestSigningWithTenantKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ctx := context.Background()
	keys := e.keys
	k1, err := keys.Create(ctx, "acme", "acme/ops")
	if err != nil {
		t.Fatal(err)
	}
	target := newKeyTarget(t)
	cfg := e.config("w1")
	cfg.AllowTargetAddrs = target.srv.Listener.Addr().String()
	// Longer than the test: what the worker learns, it learns by asking.
	cfg.SigningKeyRefresh = time.Hour
	w1 := e.startInProcessWith(cfg, app.Deps{})

	fire := func(tenant string) signedRequest {
		t.Helper()
		f := e.firing(uuid.Must(uuid.NewV7()), time.Now().Add(1500*time.Millisecond), sundialv1.Priority_PRIORITY_HIGH)
		f.Tenant = tenant
		f.Target.GetHttp().Url = target.srv.URL + "/hook"
		e.produce([]*sundialv1.Firing{f}, nil)
		return target.wait(t, f.GetExecutionId())
	}
	valid := func(tenant string) []signingkey.Key {
		t.Helper()
		m, _, err := keys.Valid(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m[tenant]
	}

	r := fire("acme")
	if !strings.Contains(r.header, "kid="+k1.ID+",v1=") || strings.Count(r.header, "v1=") != 1 {
		t.Fatalf("acme's request: %q", r.header)
	}
	if err := r.verify(k1); err != nil {
		t.Fatalf("acme's key: %v", err)
	}

	// initech's first job: the api made its key in the job's transaction
	// (EnsureTx, as its create hook does), unseen by the worker so far.
	tx, err := e.pg.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if made, err := keys.EnsureTx(ctx, tx, "initech", "sundial-api (first job)"); err != nil || !made {
		t.Fatalf("the api's first-job key: %v %v", made, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	initech := valid("initech")
	if len(initech) != 1 {
		t.Fatalf("initech's keys: %+v", initech)
	}
	i := fire("initech")
	if !strings.Contains(i.header, "kid="+initech[0].ID+",v1=") || strings.Count(i.header, "v1=") != 1 || i.verify(initech[0]) != nil {
		t.Fatalf("initech's first request: %q, want its key %s only", i.header, initech[0].ID)
	}
	if err := r.verify(initech[0]); !errors.Is(err, signature.ErrUnknownKey) {
		t.Fatalf("another tenant's key verifies acme's request: %v", err)
	}
	if err := signature.Verify(initech[0].Secret, r.header, r.exec, r.body, r.received, time.Minute); !errors.Is(err, signature.ErrMismatch) {
		t.Fatalf("another tenant's secret verifies acme's request: %v", err)
	}

	// globex has firings but no key: the worker makes it, once.
	g := fire("globex")
	globex := valid("globex")
	if len(globex) != 1 || !strings.Contains(g.header, "kid="+globex[0].ID+",v1=") || strings.Count(g.header, "v1=") != 1 || g.verify(globex[0]) != nil {
		t.Fatalf("globex's request: %q (keys %+v)", g.header, globex)
	}
	if l, err := keys.List(ctx, "globex"); err != nil || len(l) != 1 || l[0].CreatedBy != "sundial-worker" {
		t.Fatalf("globex's key was not made by the worker: %+v %v", l, err)
	}
	if g2 := fire("globex"); g2.verify(globex[0]) != nil || len(valid("globex")) != 1 {
		t.Fatalf("globex's second request: %q", g2.header)
	}

	// Rotation with an overlap: both keys sign, the new one first, and
	// nothing else does.
	k2, prev, err := keys.Rotate(ctx, "acme", "acme/ops", time.Hour)
	if err != nil || prev.ID != k1.ID {
		t.Fatal(err)
	}
	// A worker learns of a rotation at its refresh, and w1's is an hour:
	// w2, which loads the keys at its start, takes over.
	for i := len(w1.Services) - 1; i >= 0; i-- {
		w1.Services[i].Stop()
	}
	w2cfg := e.config("w2")
	w2cfg.AllowTargetAddrs = cfg.AllowTargetAddrs
	w2cfg.SigningKeyRefresh = 200 * time.Millisecond
	e.startInProcessWith(w2cfg, app.Deps{})
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = fire("acme")
		if strings.Contains(r.header, "kid="+k2.ID) || time.Now().After(deadline) {
			break
		}
	}
	if !strings.HasPrefix(r.header, "t=") || !strings.Contains(r.header, "kid="+k2.ID) || strings.Count(r.header, "v1=") != 2 ||
		strings.Index(r.header, "kid="+k2.ID) > strings.Index(r.header, "kid="+k1.ID) {
		t.Fatalf("during the overlap: %q", r.header)
	}
	for _, k := range []signingkey.Key{k1, k2} {
		if err := r.verify(k); err != nil {
			t.Fatalf("during the overlap, with %s: %v", k.ID, err)
		}
	}

	// Nothing secret reached the workers' log.
	logs := e.logs.String()
	for _, s := range [][]byte{k1.Secret, k2.Secret, initech[0].Secret, globex[0].Secret} {
		if strings.Contains(logs, string(s)) {
			t.Fatalf("a signing secret reached the worker's log")
		}
	}
}

// With --platform-signature-until (a migration from the platform's
// secret) a worker's requests also carry the platform secret's unnamed
// signature, after the tenant's key's, until the stated instant, and not
// after it.
func TestPlatformSignatureUntil(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ctx := context.Background()
	key, err := e.keys.Create(ctx, "acme", "acme/ops")
	if err != nil {
		t.Fatal(err)
	}
	platform := []byte("platform-secret-" + uuid.NewString())
	target := newKeyTarget(t)
	cfg := e.config("w1")
	cfg.AllowTargetAddrs = target.srv.Listener.Addr().String()
	cfg.SigningSecret = string(platform)
	until := time.Now().Add(8 * time.Second).Truncate(time.Second)
	cfg.PlatformSignatureUntil = until
	e.startInProcessWith(cfg, app.Deps{})

	fire := func(at time.Time) signedRequest {
		t.Helper()
		f := e.firing(uuid.Must(uuid.NewV7()), at, sundialv1.Priority_PRIORITY_HIGH)
		f.Tenant = "acme"
		f.Target.GetHttp().Url = target.srv.URL + "/hook"
		e.produce([]*sundialv1.Firing{f}, nil)
		return target.wait(t, f.GetExecutionId())
	}
	r := fire(time.Now().Add(500 * time.Millisecond))
	if r.received.After(until) {
		t.Fatalf("the first firing arrived at %s, after the migration's end %s", r.received, until)
	}
	if err := r.verify(key); err != nil || strings.Count(r.header, "v1=") != 2 ||
		signature.Verify(platform, r.header, r.exec, r.body, r.received, time.Minute) != nil ||
		strings.LastIndex(r.header, "kid=") > strings.LastIndex(r.header, ",v1=") {
		t.Fatalf("before the end: %q (%v)", r.header, err)
	}
	a := fire(until.Add(time.Second))
	if err := a.verify(key); err != nil || strings.Count(a.header, "v1=") != 1 {
		t.Fatalf("after the end: %q (%v)", a.header, err)
	}
	if err := signature.Verify(platform, a.header, a.exec, a.body, a.received, time.Minute); !errors.Is(err, signature.ErrMismatch) {
		t.Fatalf("the platform secret verifies after the end: %v", err)
	}
	if strings.Contains(e.logs.String(), string(platform)) {
		t.Fatal("the platform secret reached the worker's log")
	}
}
