//go:build integration

package signingkey_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/migrations"
	"github.com/sundialhq/sundial/pkg/signingkey"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// Create, rotate with an overlap, rotate again during it, and rotate with
// no overlap, against real Postgres: at most two valid keys, the current
// first; secrets at rest only sealed; Valid opens them for the workers.
func TestStoreRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := testinfra.Postgres(t)
	if err := migrations.Up(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	kek, err := signingkey.NewKEK([]byte(strings.Repeat("e", 32)))
	if err != nil {
		t.Fatal(err)
	}
	st := signingkey.NewStore(pool, kek)

	if _, _, err := st.Rotate(ctx, "acme", "acme/ops", time.Hour); !errors.Is(err, signingkey.ErrNone) {
		t.Fatalf("rotate without a key: %v", err)
	}
	k1, err := st.Create(ctx, "acme", "acme/ops", 2*time.Hour)
	if err != nil || !k1.Current() || len(k1.Secret) == 0 || k1.PlatformUntil.Sub(k1.CreatedAt) != 2*time.Hour {
		t.Fatalf("create: %+v %v", k1, err)
	}
	if _, err := st.Create(ctx, "acme", "acme/ops", 0); !errors.Is(err, signingkey.ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := st.Create(ctx, "initech", "initech/ops", -time.Second); err == nil {
		t.Fatal("negative platform overlap accepted")
	}
	g1, err := st.Create(ctx, "globex", "globex/ops", 0)
	if err != nil || !g1.PlatformUntil.IsZero() {
		t.Fatalf("create without platform overlap: %+v %v", g1, err)
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
	if !list[0].PlatformUntil.IsZero() || !list[1].PlatformUntil.Equal(k1.PlatformUntil) {
		t.Fatalf("platform overlap: a rotation's key has one, or the first key lost its own: %+v", list)
	}
	valid, bad, err := st.Valid(ctx)
	if err != nil || len(bad) != 0 || len(valid["acme"]) != 2 || !bytes.Equal(valid["acme"][0].Secret, k2.Secret) ||
		!bytes.Equal(valid["acme"][1].Secret, k1.Secret) || !valid["acme"][1].PlatformUntil.Equal(k1.PlatformUntil) ||
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
	if _, err := signingkey.NewStore(pool, other).Create(ctx, "initech", "initech/ops", 0); err != nil {
		t.Fatal(err)
	}
	valid, bad, err = st.Valid(ctx)
	if err != nil || len(bad) != 1 || bad[0].Tenant != "initech" || len(valid["initech"]) != 0 {
		t.Fatalf("foreign row: %+v %+v %v", valid, bad, err)
	}
}
