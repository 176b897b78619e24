//go:build integration

package apitest_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

func keyAudit(t *testing.T, ctx context.Context, c sundialv1.SigningKeyServiceClient, req *sundialv1.ListSigningKeyAuditRequest) []*sundialv1.SigningKeyAuditEntry {
	t.Helper()
	resp, err := c.ListSigningKeyAudit(ctx, req)
	if err != nil {
		t.Fatalf("ListSigningKeyAudit: %v", err)
	}
	return resp.GetEntries()
}

// Every change to a tenant's signing keys on the real api over real
// Postgres: a create and a rotation each write one audit row naming the
// caller and the key (never its secret), refused changes write none, the
// trail pages newest first, a platform operator reads it by naming the
// tenant, and another tenant cannot read it.
func TestIntegrationSigningKeyAudit(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	acme := sundialv1.NewSigningKeyServiceClient(dial(t, api, apitest.TokenAcme))
	globex := sundialv1.NewSigningKeyServiceClient(dial(t, api, apitest.TokenGlobex))
	operator := sundialv1.NewSigningKeyServiceClient(dial(t, api, apitest.TokenOperator))

	if got := keyAudit(t, ctx, acme, &sundialv1.ListSigningKeyAuditRequest{}); len(got) != 0 {
		t.Fatalf("trail before any change: %v", got)
	}

	created, err := acme.CreateSigningKey(ctx, &sundialv1.CreateSigningKeyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	trail := keyAudit(t, ctx, acme, &sundialv1.ListSigningKeyAuditRequest{})
	if len(trail) != 1 {
		t.Fatalf("after create: %v", trail)
	}
	e := trail[0]
	if e.GetAction() != "create" || e.GetKeyId() != created.GetKey().GetKeyId() || e.GetActor() != "acme/ops" || e.GetTime() == nil ||
		!e.GetTime().AsTime().Equal(created.GetKey().GetCreateTime().AsTime()) || len(e.GetDetail()) != 0 {
		t.Fatalf("create's row: %v (key %v)", e, created.GetKey())
	}

	// Refused changes write nothing: a second create, a bad overlap, a
	// rotation by a tenant without a key, a write by a read-only token.
	if _, err := acme.CreateSigningKey(ctx, &sundialv1.CreateSigningKeyRequest{}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second create: %v", err)
	}
	if _, err := acme.RotateSigningKey(ctx, &sundialv1.RotateSigningKeyRequest{Overlap: durationpb.New(-1)}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("negative overlap: %v", err)
	}
	if _, err := globex.RotateSigningKey(ctx, &sundialv1.RotateSigningKeyRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("globex rotate without a key: %v", err)
	}
	if _, err := operator.RotateSigningKey(metadata.AppendToOutgoingContext(ctx, auth.TenantHeader, "acme"), &sundialv1.RotateSigningKeyRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("operator rotating acme's key: %v", err)
	}
	var rows int
	if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM signing_key_audit`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d audit rows after the refused changes (%v), want the create's", rows, err)
	}

	// Three rotations: the second ends the first's overlap at once.
	var rotated []*sundialv1.RotateSigningKeyResponse
	for range 3 {
		r, err := acme.RotateSigningKey(ctx, &sundialv1.RotateSigningKeyRequest{})
		if err != nil {
			t.Fatal(err)
		}
		rotated = append(rotated, r)
	}
	trail = keyAudit(t, ctx, acme, &sundialv1.ListSigningKeyAuditRequest{})
	if len(trail) != 4 || trail[3].GetKeyId() != created.GetKey().GetKeyId() {
		t.Fatalf("after three rotations: %v", trail)
	}
	for i, r := range rotated {
		e := trail[2-i] // newest first
		if e.GetAction() != "rotate" || e.GetKeyId() != r.GetKey().GetKeyId() || e.GetActor() != "acme/ops" ||
			e.GetDetail()["previous_key_id"] != r.GetPrevious().GetKeyId() || e.GetDetail()["previous_expire_time"] == "" {
			t.Fatalf("rotation %d's row: %v (answer %v)", i, e, r)
		}
	}
	if got := trail[1].GetDetail()["ended_key_ids"]; got != rotated[0].GetPrevious().GetKeyId() {
		t.Fatalf("second rotation ended %q, want the first rotation's previous key %s", got, rotated[0].GetPrevious().GetKeyId())
	}
	if _, ok := trail[2].GetDetail()["ended_key_ids"]; ok {
		t.Fatalf("first rotation ended a key: %v", trail[2])
	}

	// No secret anywhere in the trail.
	var raw string
	if err := api.Pool.QueryRow(ctx, `SELECT string_agg(key_id || actor || action || detail::text, ' ') FROM signing_key_audit`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{created.GetSecret(), rotated[0].GetSecret(), rotated[1].GetSecret(), rotated[2].GetSecret()} {
		if secret == "" || strings.Contains(raw, secret) {
			t.Fatalf("a secret in the trail (or none shown): %q", raw)
		}
	}

	// Pages of two, newest first, the same rows as one page.
	first, err := acme.ListSigningKeyAudit(ctx, &sundialv1.ListSigningKeyAuditRequest{PageSize: 2})
	if err != nil || len(first.GetEntries()) != 2 || first.GetNextPageToken() == "" || first.GetEntries()[0].GetKeyId() != trail[0].GetKeyId() {
		t.Fatalf("first page: %v %v", first, err)
	}
	second, err := acme.ListSigningKeyAudit(ctx, &sundialv1.ListSigningKeyAuditRequest{PageSize: 2, PageToken: first.GetNextPageToken()})
	if err != nil || len(second.GetEntries()) != 2 || second.GetNextPageToken() != "" ||
		second.GetEntries()[0].GetKeyId() != trail[2].GetKeyId() || second.GetEntries()[1].GetKeyId() != trail[3].GetKeyId() {
		t.Fatalf("second page: %v %v", second, err)
	}
	if _, err := acme.ListSigningKeyAudit(ctx, &sundialv1.ListSigningKeyAuditRequest{PageToken: "not-a-token"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "page_token") {
		t.Fatalf("bad page token: %v", err)
	}
	if _, err := acme.ListSigningKeyAudit(ctx, &sundialv1.ListSigningKeyAuditRequest{PageSize: -1}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "page_size") {
		t.Fatalf("negative page size: %v", err)
	}

	// Another tenant sees its own (empty) trail, cannot name acme's, and
	// acme's page token does not page through it.
	if got := keyAudit(t, ctx, globex, &sundialv1.ListSigningKeyAuditRequest{}); len(got) != 0 {
		t.Fatalf("globex sees %v", got)
	}
	if _, err := globex.ListSigningKeyAudit(metadata.AppendToOutgoingContext(ctx, auth.TenantHeader, "acme"), &sundialv1.ListSigningKeyAuditRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("globex naming acme: %v", err)
	}
	if _, err := globex.ListSigningKeyAudit(ctx, &sundialv1.ListSigningKeyAuditRequest{PageToken: first.GetNextPageToken()}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("globex with acme's page token: %v", err)
	}

	// A platform operator reads acme's trail by naming acme.
	byOp := keyAudit(t, metadata.AppendToOutgoingContext(ctx, auth.TenantHeader, "acme"), operator, &sundialv1.ListSigningKeyAuditRequest{})
	if len(byOp) != 4 || byOp[0].GetKeyId() != trail[0].GetKeyId() {
		t.Fatalf("operator reading acme's: %v", byOp)
	}

	// And over HTTP.
	code, _, body := post(t, api, "/v1/signing-keys:audit?page_size=1", apitest.TokenAcme, nil)
	entries, _ := body["entries"].([]any)
	if code != http.StatusOK || len(entries) != 1 || entries[0].(map[string]any)["key_id"] != trail[0].GetKeyId() || body["next_page_token"] == "" {
		t.Fatalf("GET /v1/signing-keys:audit: %d %v", code, body)
	}
}
