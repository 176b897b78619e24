//go:build integration

package apitest_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/client"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// The Go client's SigningKeyService over gRPC against the real api:
// create, a refused second create, a rotation without overlap, and each
// tenant listing only its own keys.
func TestIntegrationGoClientSigningKeys(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	acme, err := client.New(api.GRPCAddr, apitest.TokenAcme, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer acme.Close()
	globex, err := client.New(api.GRPCAddr, apitest.TokenGlobex, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer globex.Close()

	created, err := acme.SigningKeyService().CreateSigningKey(ctx, &sundialv1.CreateSigningKeyRequest{})
	if err != nil || created.GetSecret() == "" {
		t.Fatalf("create: %v %v", created, err)
	}
	if _, err := acme.SigningKeyService().CreateSigningKey(ctx, &sundialv1.CreateSigningKeyRequest{}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second create: %v", err)
	}
	rotated, err := acme.SigningKeyService().RotateSigningKey(ctx, &sundialv1.RotateSigningKeyRequest{Overlap: durationpb.New(0)})
	if err != nil || rotated.GetPrevious().GetKeyId() != created.GetKey().GetKeyId() {
		t.Fatalf("rotate: %v %v", rotated, err)
	}
	// No overlap: the previous key is no longer valid, so not listed.
	list, err := acme.SigningKeyService().ListSigningKeys(ctx, &sundialv1.ListSigningKeysRequest{})
	if err != nil || len(list.GetKeys()) != 1 || list.GetKeys()[0].GetKeyId() != rotated.GetKey().GetKeyId() || !list.GetKeys()[0].GetCurrent() {
		t.Fatalf("list: %v %v", list, err)
	}
	if list, err := globex.SigningKeyService().ListSigningKeys(ctx, &sundialv1.ListSigningKeysRequest{}); err != nil || len(list.GetKeys()) != 0 {
		t.Fatalf("globex: %v %v", list, err)
	}
	if _, err := globex.SigningKeyService().RotateSigningKey(ctx, &sundialv1.RotateSigningKeyRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("globex rotate without a key: %v", err)
	}
}
