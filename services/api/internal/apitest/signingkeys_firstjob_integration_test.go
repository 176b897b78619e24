//go:build integration

package apitest_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// A tenant's first job, created through the real api over gRPC, makes the
// tenant's signing key in the job's transaction; the tenant's first
// CreateSigningKey shows that key, once. Concurrent first jobs make one
// key; a refused create makes none. The platform overlap is gone.
func TestIntegrationFirstJobMakesTheSigningKey(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	count := func(tenant string) (n int) {
		t.Helper()
		if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM signing_keys WHERE tenant = $1`, tenant).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	acmeConn := dial(t, api, apitest.TokenAcme)
	acme, acmeKeys := sundialv1.NewJobServiceClient(acmeConn), sundialv1.NewSigningKeyServiceClient(acmeConn)

	if n := count("acme"); n != 0 {
		t.Fatalf("acme has %d keys before its first job", n)
	}
	// A refused create writes nothing, the key included.
	bad := cronJob("bad")
	bad.Schedule = &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "not a cron"}}
	if _, err := acme.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: bad}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad job: %v", err)
	}
	if n := count("acme"); n != 0 {
		t.Fatalf("a refused create made %d keys", n)
	}
	if _, err := acme.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: cronJob("first")}); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: cronJob("second")}); err != nil {
		t.Fatal(err)
	}
	if n := count("acme"); n != 1 {
		t.Fatalf("acme has %d keys after two jobs, want 1", n)
	}
	keys := signingkey.NewStore(api.Pool, api.SigningKEK)
	if l, err := keys.List(ctx, "acme"); err != nil || len(l) != 1 || l[0].CreatedBy != "sundial-api (first job)" {
		t.Fatalf("list: %+v %v", l, err)
	}
	valid, _, err := keys.Valid(ctx)
	if err != nil || len(valid["acme"]) != 1 {
		t.Fatalf("valid: %+v %v", valid["acme"], err)
	}
	made := valid["acme"][0]
	list, err := acmeKeys.ListSigningKeys(ctx, &sundialv1.ListSigningKeysRequest{})
	if err != nil || len(list.GetKeys()) != 1 || list.GetKeys()[0].GetKeyId() != made.ID {
		t.Fatalf("list: %v %v", list, err)
	}

	// The platform overlap is no longer offered: refused, naming the field,
	// and nothing shown.
	_, err = acmeKeys.CreateSigningKey(ctx, &sundialv1.CreateSigningKeyRequest{PlatformOverlap: durationpb.New(24 * time.Hour)})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "platform_overlap") {
		t.Fatalf("platform overlap: %v", err)
	}
	shown, err := acmeKeys.CreateSigningKey(ctx, &sundialv1.CreateSigningKeyRequest{})
	if err != nil || shown.GetKey().GetKeyId() != made.ID || !bytes.Equal([]byte(shown.GetSecret()), made.Secret) ||
		shown.GetKey().GetPlatformOverlapEndTime() != nil {
		t.Fatalf("create after the first job: %v %v (made %s)", shown, err, made.ID)
	}
	if _, err := acmeKeys.CreateSigningKey(ctx, &sundialv1.CreateSigningKeyRequest{}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second create: %v", err)
	}

	// Globex's first jobs, all at once: one key.
	globex := sundialv1.NewJobServiceClient(dial(t, api, apitest.TokenGlobex))
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = globex.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: cronJob("concurrent")})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if n := count("globex"); n != 1 {
		t.Fatalf("globex has %d keys after concurrent first jobs, want 1", n)
	}
}
