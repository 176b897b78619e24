package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// fakeKeys is the SigningKeyService side of the fake api: it records the
// rotation asked for and answers fixed keys.
type fakeKeys struct {
	sundialv1.UnimplementedSigningKeyServiceServer
	mu     sync.Mutex
	create *sundialv1.CreateSigningKeyRequest
	rotate *sundialv1.RotateSigningKeyRequest
}

var (
	fakeKeyNow = time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC)
	fakeCur    = &sundialv1.SigningKey{KeyId: "k2", CreateTime: timestamppb.New(fakeKeyNow), Current: true, CreatedBy: "acme/ops"}
	fakePrev   = &sundialv1.SigningKey{KeyId: "k1", CreateTime: timestamppb.New(fakeKeyNow.Add(-time.Hour)),
		ExpireTime: timestamppb.New(fakeKeyNow.Add(48 * time.Hour)), CreatedBy: "acme/ops"}
)

func (f *fakeKeys) CreateSigningKey(_ context.Context, req *sundialv1.CreateSigningKeyRequest) (*sundialv1.CreateSigningKeyResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.create = req
	k := proto.Clone(fakeCur).(*sundialv1.SigningKey)
	return &sundialv1.CreateSigningKeyResponse{Key: k, Secret: "sdk_new-secret"}, nil
}

func (f *fakeKeys) RotateSigningKey(_ context.Context, req *sundialv1.RotateSigningKeyRequest) (*sundialv1.RotateSigningKeyResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rotate = req
	return &sundialv1.RotateSigningKeyResponse{Key: fakeCur, Secret: "sdk_rotated-secret", Previous: fakePrev}, nil
}

func (f *fakeKeys) ListSigningKeys(context.Context, *sundialv1.ListSigningKeysRequest) (*sundialv1.ListSigningKeysResponse, error) {
	return &sundialv1.ListSigningKeysResponse{Keys: []*sundialv1.SigningKey{fakeCur, fakePrev}}, nil
}

func TestSigningKeyCommands(t *testing.T) {
	f, addr := startFake(t)

	code, out, stderr := run(t, addr, nil, "signing-key create")
	if code != 0 || !strings.Contains(out, "sdk_new-secret") || !strings.Contains(out, "k2") || !strings.Contains(stderr, "not shown again") ||
		strings.Contains(out, "platform") {
		t.Fatalf("create: %d\n%s%s", code, out, stderr)
	}
	f.keys.mu.Lock()
	if o := f.keys.create.GetPlatformOverlap(); o != nil {
		t.Errorf("a platform overlap was asked for: %v", o)
	}
	f.keys.mu.Unlock()
	// The platform overlap is gone: the flag with it.
	if code, _, stderr := run(t, addr, nil, "signing-key create", "--platform-overlap", "0s"); code != 2 || !strings.Contains(stderr, "platform-overlap") {
		t.Fatalf("create --platform-overlap: %d %s", code, stderr)
	}

	code, out, stderr = run(t, addr, nil, "signing-key rotate", "--overlap", "48h")
	if code != 0 || !strings.Contains(out, "sdk_rotated-secret") || !strings.Contains(out, "k1, valid until 2026-11-28T05:00:00Z") {
		t.Fatalf("rotate: %d\n%s%s", code, out, stderr)
	}
	f.keys.mu.Lock()
	if got := f.keys.rotate.GetOverlap().AsDuration(); got != 48*time.Hour {
		t.Errorf("overlap sent %s", got)
	}
	f.keys.mu.Unlock()
	// Zero is sent as zero (end the old key now), not left unset (24 h).
	if code, out, stderr := run(t, addr, nil, "signing-key rotate", "--overlap", "0s"); code != 0 {
		t.Fatalf("rotate --overlap 0s: %d\n%s%s", code, out, stderr)
	}
	f.keys.mu.Lock()
	if o := f.keys.rotate.GetOverlap(); o == nil || o.AsDuration() != 0 {
		t.Errorf("overlap 0 sent as %v", o)
	}
	f.keys.mu.Unlock()
	if code, _, stderr := run(t, addr, nil, "signing-key rotate", "--overlap", "-1h"); code != 2 || !strings.Contains(stderr, "--overlap") {
		t.Fatalf("negative overlap: %d %s", code, stderr)
	}

	code, out, _ = run(t, addr, nil, "signing-key list")
	if code != 0 || !strings.Contains(out, "k2      current") || !strings.Contains(out, "k1      previous") || strings.Contains(out, "sdk_") {
		t.Fatalf("list: %d\n%s", code, out)
	}
	code, out, _ = run(t, addr, nil, "signing-key list", "-o", "json")
	var listed struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil || len(listed.Keys) != 2 {
		t.Fatalf("list -o json: %d %v\n%s", code, err, out)
	}
}
