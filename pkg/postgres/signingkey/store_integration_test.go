//go:build integration

package signingkey_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// Create, rotate with an overlap, rotate again during it, and rotate with
// no overlap, against real Postgres: at most two valid keys, the current
// first; secrets at rest only sealed; Valid opens them for the workers.
func TestStoreRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.Migrated(t)
	kek, err := signingkey.NewKEK([]byte(strings.Repeat("e", 32)))
	if err != nil {
		t.Fatal(err)
	}
	st := signingkey.NewStore(pool, kek)

	if _, _, err := st.Rotate(ctx, "acme", "acme/ops", time.Hour); !errors.Is(err, signingkey.ErrNone) {
		t.Fatalf("rotate without a key: %v", err)
	}
	k1, err := st.Create(ctx, "acme", "acme/ops")
	if err != nil || !k1.Current() || len(k1.Secret) == 0 {
		t.Fatalf("create: %+v %v", k1, err)
	}
	if _, err := st.Create(ctx, "acme", "acme/ops"); !errors.Is(err, signingkey.ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	g1, err := st.Create(ctx, "globex", "globex/ops")
	if err != nil {
		t.Fatal(err)
	}
	var sealed []byte
	if err := pool.QueryRow(ctx, `SELECT sealed FROM signing_keys WHERE key_id = $1`, k1.ID).Scan(&sealed); err != nil || bytes.Contains(sealed, k1.Secret) {
		t.Fatalf("stored in the clear (%v)", err)
	}

	k2, prev, err := st.Rotate(ctx, "acme", "acme/ops", time.Hour)
	if err != nil || prev.ID != k1.ID || prev.Current() || k2.ID == k1.ID || bytes.Equal(k2.Secret, k1.Secret) {
		t.Fatalf("rotate: %+v %+v %v", k2, prev, err)
	}
	list, err := st.List(ctx, "acme")
	if err != nil || len(list) != 2 || list[0].ID != k2.ID || !list[0].Current() || list[1].ID != k1.ID || list[1].Secret != nil {
		t.Fatalf("list after rotation: %+v %v", list, err)
	}
	if d := list[1].ExpiresAt.Sub(list[0].CreatedAt); d != time.Hour {
		t.Fatalf("overlap %s", d)
	}
	valid, bad, err := st.Valid(ctx)
	if err != nil || len(bad) != 0 || len(valid["acme"]) != 2 || !bytes.Equal(valid["acme"][0].Secret, k2.Secret) ||
		!bytes.Equal(valid["acme"][1].Secret, k1.Secret) ||
		len(valid["globex"]) != 1 || !bytes.Equal(valid["globex"][0].Secret, g1.Secret) {
		t.Fatalf("valid: %+v %v %v", valid, bad, err)
	}

	// A rotation during the overlap ends it: never three valid keys.
	k3, prev, err := st.Rotate(ctx, "acme", "acme/ops", time.Hour)
	if err != nil || prev.ID != k2.ID {
		t.Fatalf("second rotation: %+v %v", prev, err)
	}
	if list, _ := st.List(ctx, "acme"); len(list) != 2 || list[0].ID != k3.ID || list[1].ID != k2.ID {
		t.Fatalf("after the second rotation: %+v", list)
	}
	// No overlap: the rotated-out key is invalid at once.
	k4, _, err := st.Rotate(ctx, "acme", "acme/ops", 0)
	if err != nil {
		t.Fatal(err)
	}
	if list, _ := st.List(ctx, "acme"); len(list) != 1 || list[0].ID != k4.ID {
		t.Fatalf("after a rotation without overlap: %+v", list)
	}
	if _, _, err := st.Rotate(ctx, "acme", "acme/ops", -time.Second); err == nil {
		t.Fatal("negative overlap accepted")
	}

	// A row sealed under another key-encryption key is reported, not used.
	other, _ := signingkey.NewKEK([]byte(strings.Repeat("o", 32)))
	if _, err := signingkey.NewStore(pool, other).Create(ctx, "initech", "initech/ops"); err != nil {
		t.Fatal(err)
	}
	valid, bad, err = st.Valid(ctx)
	if err != nil || len(bad) != 1 || bad[0].Tenant != "initech" || len(valid["initech"]) != 0 {
		t.Fatalf("foreign row: %+v %+v %v", valid, bad, err)
	}
}

// A tenant's first jobs, created at once on two api replicas (two
// transactions on two connections), make one key between them: the later
// insert waits for the earlier transaction and does nothing. The key is
// not shown until the tenant's Create, which shows it once; Ensure (a
// worker's) returns it with its secret, or makes one for a tenant
// without.
func TestEnsureMakesOneKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.Migrated(t)
	kek, err := signingkey.NewKEK([]byte(strings.Repeat("e", 32)))
	if err != nil {
		t.Fatal(err)
	}
	// Two stores: two replicas, each with its own memory of keyed tenants.
	a, b := signingkey.NewStore(pool, kek), signingkey.NewStore(pool, kek)
	txA, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx)
	txB, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback(ctx)
	madeA, err := a.EnsureTx(ctx, txA, "acme", "acme/ops")
	if err != nil || !madeA {
		t.Fatalf("first: %v %v", madeA, err)
	}
	// Again in the same transaction: the key it made counts.
	if made, err := a.EnsureTx(ctx, txA, "acme", "acme/ops"); err != nil || made {
		t.Fatalf("again in the same transaction: %v %v", made, err)
	}
	type result struct {
		made bool
		err  error
	}
	done := make(chan result, 1)
	go func() {
		made, err := b.EnsureTx(ctx, txB, "acme", "acme/deployer")
		done <- result{made, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("the second transaction did not wait for the first: %+v", r)
	case <-time.After(200 * time.Millisecond):
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.made {
		t.Fatalf("second: %+v", r)
	}
	if err := txB.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM signing_keys WHERE tenant = 'acme'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d keys (%v), want 1", n, err)
	}
	valid, _, err := a.Valid(ctx)
	if err != nil || len(valid["acme"]) != 1 {
		t.Fatalf("valid: %+v %v", valid, err)
	}
	made := valid["acme"][0]

	// The tenant's first Create shows the key made for it, once.
	shown, err := a.Create(ctx, "acme", "acme/ops")
	if err != nil || shown.ID != made.ID || !bytes.Equal(shown.Secret, made.Secret) {
		t.Fatalf("create after the first job: %+v %v (made %s)", shown, err, made.ID)
	}
	if _, err := b.Create(ctx, "acme", "acme/ops"); !errors.Is(err, signingkey.ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	audit, err := a.ListAudit(ctx, "acme", 0, 10)
	if err != nil || len(audit) != 2 || audit[0].Action != signingkey.ActionShow || audit[1].Action != signingkey.ActionCreate ||
		audit[0].KeyID != made.ID || audit[1].Actor != "acme/ops" {
		t.Fatalf("audit: %+v %v", audit, err)
	}

	// A worker's Ensure: the keys there are, or a first one made.
	keys, err := b.Ensure(ctx, "acme", "worker")
	if err != nil || len(keys) != 1 || keys[0].ID != made.ID || !bytes.Equal(keys[0].Secret, made.Secret) {
		t.Fatalf("ensure with a key: %+v %v", keys, err)
	}
	keys, err = b.Ensure(ctx, "globex", "worker")
	if err != nil || len(keys) != 1 || len(keys[0].Secret) == 0 || !keys[0].Current() {
		t.Fatalf("ensure without a key: %+v %v", keys, err)
	}
	again, err := a.Ensure(ctx, "globex", "worker")
	if err != nil || len(again) != 1 || again[0].ID != keys[0].ID {
		t.Fatalf("ensure again: %+v %v", again, err)
	}
}
