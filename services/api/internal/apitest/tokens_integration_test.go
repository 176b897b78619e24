//go:build integration

package apitest_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/services/api/internal/tokens"
)

func createToken(t *testing.T, ts sundialv1.TokenServiceClient, name string, role sundialv1.Role, ttl time.Duration) (*sundialv1.Token, string) {
	t.Helper()
	req := &sundialv1.CreateTokenRequest{Name: name, Role: role}
	if ttl > 0 {
		req.Ttl = durationpb.New(ttl)
	}
	resp, err := ts.CreateToken(context.Background(), req)
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return resp.GetToken(), resp.GetSecret()
}

// Tokens made through the api, on the real api over real Postgres:
// created (shown once, stored hashed), used over gRPC and HTTP with their
// role enforced, listed, revoked (refused on the api within the stated
// bound, with no restart), expired, and every change in the token audit
// trail with its actor.
func TestIntegrationAPITokens(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	admin := sundialv1.NewTokenServiceClient(dial(t, api, apitest.TokenAcme))

	ro, roSecret := createToken(t, admin, "viewer", sundialv1.Role_ROLE_TENANT_READ_ONLY, 0)
	ci, ciSecret := createToken(t, admin, "ci", sundialv1.Role_ROLE_TENANT_ADMIN, time.Hour)
	if !strings.HasPrefix(roSecret, "sdl_"+ro.GetId()+"_") || ro.GetTenant() != "acme" || ro.GetCreatedBy() != "acme/ops" || ci.GetExpireTime() == nil {
		t.Fatalf("created %v / %v", ro, ci)
	}
	var stored string
	if err := api.Pool.QueryRow(ctx, `SELECT secret_hash FROM api_tokens WHERE id = $1`, ro.GetId()).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stored, "$argon2id$") || strings.Contains(stored, strings.TrimPrefix(roSecret, "sdl_"+ro.GetId()+"_")) {
		t.Fatalf("stored %q", stored)
	}
	if _, err := admin.CreateToken(ctx, &sundialv1.CreateTokenRequest{Name: "viewer", Role: sundialv1.Role_ROLE_TENANT_ADMIN}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("same name again: %v", err)
	}
	if _, err := admin.CreateToken(ctx, &sundialv1.CreateTokenRequest{Name: "x", Role: sundialv1.Role_ROLE_PLATFORM_OPERATOR}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("admin making an operator token: %v", err)
	}
	if _, err := admin.CreateToken(ctx, &sundialv1.CreateTokenRequest{Name: "bad name", Role: sundialv1.Role_ROLE_TENANT_ADMIN}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "name") {
		t.Fatalf("bad name: %v", err)
	}

	// The new admin token works at once, on every call of its tenant.
	ciJobs := sundialv1.NewJobServiceClient(dial(t, api, ciSecret))
	created, err := ciJobs.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: cronJob("by-ci")})
	if err != nil {
		t.Fatalf("api-made admin token: %v", err)
	}
	audit, err := ciJobs.ListJobAudit(ctx, &sundialv1.ListJobAuditRequest{Id: created.GetJob().GetId()})
	if err != nil || len(audit.GetEntries()) == 0 || audit.GetEntries()[0].GetActor() != "acme/ci" {
		t.Fatalf("job audit of the api-made token: %v %v", audit, err)
	}

	// Read-only: reads yes, writes PermissionDenied naming role and method,
	// over gRPC and HTTP.
	roJobs := sundialv1.NewJobServiceClient(dial(t, api, roSecret))
	if _, err := roJobs.GetJob(ctx, &sundialv1.GetJobRequest{Id: created.GetJob().GetId()}); err != nil {
		t.Fatalf("read-only GetJob: %v", err)
	}
	if _, err := roJobs.ListJobs(ctx, &sundialv1.ListJobsRequest{}); err != nil {
		t.Fatalf("read-only ListJobs: %v", err)
	}
	_, err = roJobs.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: cronJob("by-viewer")})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "role read-only may not call sundial.v1.JobService/CreateJob") {
		t.Fatalf("read-only CreateJob: %v", err)
	}
	if _, err := roJobs.PauseJob(ctx, &sundialv1.PauseJobRequest{Id: created.GetJob().GetId()}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("read-only PauseJob: %v", err)
	}
	if _, err := sundialv1.NewTokenServiceClient(dial(t, api, roSecret)).ListTokens(ctx, &sundialv1.ListTokensRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("read-only ListTokens: %v", err)
	}
	code, _, body := post(t, api, "/v1/jobs", roSecret, []byte(`{"job":{"name":"x","schedule":{"cron":"@hourly"},"target":{"http":{"url":"http://127.0.0.1:9/"}}}}`))
	if code != http.StatusForbidden || !strings.Contains(body["message"].(string), "read-only") {
		t.Fatalf("read-only POST /v1/jobs: %d %v", code, body)
	}
	if code, _, _ := post(t, api, "/v1/jobs/"+created.GetJob().GetId(), roSecret, nil); code != http.StatusOK {
		t.Fatalf("read-only GET /v1/jobs/{id}: %d", code)
	}
	var n int
	if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE tenant = 'acme'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("acme has %d jobs (%v), want the one ci made", n, err)
	}

	// List: both, newest first, no secrets; another tenant sees none.
	list, err := admin.ListTokens(ctx, &sundialv1.ListTokensRequest{})
	if err != nil || len(list.GetTokens()) != 2 || list.GetTokens()[0].GetName() != "ci" || list.GetTokens()[0].GetLastUseTime() == nil {
		t.Fatalf("list: %v %v", list, err)
	}
	other, err := sundialv1.NewTokenServiceClient(dial(t, api, apitest.TokenGlobex)).ListTokens(ctx, &sundialv1.ListTokensRequest{IncludeInactive: true})
	if err != nil || len(other.GetTokens()) != 0 {
		t.Fatalf("globex sees %v %v", other, err)
	}
	if _, err := sundialv1.NewTokenServiceClient(dial(t, api, apitest.TokenGlobex)).RevokeToken(ctx, &sundialv1.RevokeTokenRequest{Id: ci.GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("globex revoking acme's token: %v", err)
	}

	// Revoke: refused within the bound, on a token the api has cached.
	if _, err := ciJobs.ListJobs(ctx, &sundialv1.ListJobsRequest{}); err != nil {
		t.Fatal(err)
	}
	rev, err := admin.RevokeToken(ctx, &sundialv1.RevokeTokenRequest{Id: ci.GetId()})
	if err != nil || rev.GetToken().GetRevokeTime() == nil || rev.GetToken().GetRevokedBy() != "acme/ops" {
		t.Fatalf("revoke: %v %v", rev, err)
	}
	revoked := time.Now()
	for {
		_, err := ciJobs.ListJobs(ctx, &sundialv1.ListJobsRequest{})
		if status.Code(err) == codes.Unauthenticated {
			break
		}
		if err != nil {
			t.Fatalf("revoked token: %v", err)
		}
		if time.Since(revoked) > tokens.RevocationBound {
			t.Fatalf("a revoked token still works %s after the revoke (bound %s)", time.Since(revoked), tokens.RevocationBound)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("revoked token refused %s after the revoke", time.Since(revoked).Round(time.Millisecond))
	if code, _, _ := post(t, api, "/v1/jobs", ciSecret, nil); code != http.StatusUnauthorized {
		t.Fatalf("revoked token over HTTP: %d", code)
	}
	if _, err := admin.RevokeToken(ctx, &sundialv1.RevokeTokenRequest{Id: ci.GetId()}); err != nil {
		t.Fatalf("revoking again: %v", err)
	}
	if list, _ := admin.ListTokens(ctx, &sundialv1.ListTokensRequest{}); len(list.GetTokens()) != 1 {
		t.Fatalf("active after revoke: %v", list)
	}
	if list, _ := admin.ListTokens(ctx, &sundialv1.ListTokensRequest{IncludeInactive: true}); len(list.GetTokens()) != 2 {
		t.Fatalf("all after revoke: %v", list)
	}
	// The name is free again once its token is revoked.
	createToken(t, admin, "ci", sundialv1.Role_ROLE_TENANT_ADMIN, 0)

	// Expired: an expiry passed is refused (here the row's, moved into
	// the past, as the database clock would).
	exp, expSecret := createToken(t, admin, "short", sundialv1.Role_ROLE_TENANT_READ_ONLY, time.Minute)
	if _, err := api.Pool.Exec(ctx, `UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, exp.GetId()); err != nil {
		t.Fatal(err)
	}
	if _, err := sundialv1.NewJobServiceClient(dial(t, api, expSecret)).ListJobs(ctx, &sundialv1.ListJobsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("expired token: %v", err)
	}

	// The audit trail: every change, newest first, with its actor.
	trail, err := admin.ListTokenAudit(ctx, &sundialv1.ListTokenAuditRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range trail.GetEntries() {
		got = append(got, e.GetAction()+":"+e.GetDetail()["name"]+":"+e.GetActor())
	}
	want := "create:short:acme/ops create:ci:acme/ops revoke:ci:acme/ops create:ci:acme/ops create:viewer:acme/ops"
	if strings.Join(got, " ") != want {
		t.Fatalf("token audit %v, want %s", got, want)
	}
	if e := trail.GetEntries()[2]; e.GetTokenId() != ci.GetId() {
		t.Fatalf("revoke entry names %s, want %s", e.GetTokenId(), ci.GetId())
	}
	page, err := admin.ListTokenAudit(ctx, &sundialv1.ListTokenAuditRequest{PageSize: 2})
	if err != nil || len(page.GetEntries()) != 2 || page.GetNextPageToken() == "" {
		t.Fatalf("audit page: %v %v", page, err)
	}
	next, err := admin.ListTokenAudit(ctx, &sundialv1.ListTokenAuditRequest{PageSize: 2, PageToken: page.GetNextPageToken()})
	if err != nil || len(next.GetEntries()) != 2 || next.GetEntries()[0].GetAction() != "revoke" {
		t.Fatalf("audit next page: %v %v", next, err)
	}
}

// A cached token stops at its expiry even between reads of its row.
func TestIntegrationTokenExpiryWhileCached(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	admin := sundialv1.NewTokenServiceClient(dial(t, api, apitest.TokenAcme))
	_, secret := createToken(t, admin, "soon", sundialv1.Role_ROLE_TENANT_READ_ONLY, time.Minute)
	clk := clock.NewFake(time.Now())
	v, err := tokens.NewVerifier(tokens.VerifierConfig{Store: tokens.NewStore(api.Pool), Clock: clk, CacheTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok, err := v.Verify(ctx, secret); !ok || err != nil || p.Role != auth.RoleReadOnly || p.Actor != "acme/soon" {
		t.Fatalf("fresh: %+v %v %v", p, ok, err)
	}
	clk.Advance(59 * time.Second)
	if _, ok, _ := v.Verify(ctx, secret); !ok {
		t.Fatal("refused before its expiry")
	}
	clk.Advance(2 * time.Second)
	if _, ok, _ := v.Verify(ctx, secret); ok {
		t.Fatal("accepted after its expiry")
	}
	if _, ok, _ := v.Verify(ctx, secret[:len(secret)-1]+"A"); ok {
		t.Fatal("a wrong secret accepted")
	}
}

// A platform operator: reads any tenant (the sundial-tenant header), lists
// every tenant's dead letters and re-drives one named tenant's, changes
// nothing else; a tenant's token cannot reach another tenant that way.
func TestIntegrationOperatorDeadLetters(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	slot := time.Now().Add(-time.Hour).Truncate(time.Minute)
	var jobs [2]*sundialv1.Job
	var dead [2]string
	for i, tok := range []string{apitest.TokenAcme, apitest.TokenGlobex} {
		resp, err := sundialv1.NewJobServiceClient(dial(t, api, tok)).CreateJob(ctx, &sundialv1.CreateJobRequest{Job: cronJob("dl")})
		if err != nil {
			t.Fatal(err)
		}
		jobs[i] = resp.GetJob()
		dead[i] = api.DeadLetter(t, jobs[i], slot, "http_5xx")
	}
	op := dial(t, api, apitest.TokenOperator)
	opDLQ := sundialv1.NewDeadLetterServiceClient(op)

	all, err := opDLQ.ListDeadLetters(ctx, &sundialv1.ListDeadLettersRequest{})
	if err != nil || len(all.GetDeadLetters()) != 2 {
		t.Fatalf("operator lists %v %v, want both tenants' dead letters", all, err)
	}
	tenants := map[string]bool{}
	for _, d := range all.GetDeadLetters() {
		tenants[d.GetFiring().GetTenant()] = true
	}
	if !tenants["acme"] || !tenants["globex"] {
		t.Fatalf("tenants listed: %v", tenants)
	}
	one, err := opDLQ.ListDeadLetters(ctx, &sundialv1.ListDeadLettersRequest{Tenant: "acme"})
	if err != nil || len(one.GetDeadLetters()) != 1 || one.GetDeadLetters()[0].GetFiring().GetExecutionId() != dead[0] {
		t.Fatalf("operator lists acme's: %v %v", one, err)
	}
	if got, err := opDLQ.GetDeadLetter(ctx, &sundialv1.GetDeadLetterRequest{ExecutionId: dead[1]}); err != nil || got.GetDeadLetter().GetFiring().GetTenant() != "globex" {
		t.Fatalf("operator gets globex's: %v %v", got, err)
	}

	// A re-drive names its tenant, and takes that tenant's only.
	if _, err := opDLQ.RedriveDeadLetters(ctx, &sundialv1.RedriveDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "tenant") {
		t.Fatalf("operator re-drive without a tenant: %v", err)
	}
	red, err := opDLQ.RedriveDeadLetters(ctx, &sundialv1.RedriveDeadLettersRequest{Tenant: "globex", Filter: &sundialv1.DeadLetterFilter{}})
	if err != nil || red.GetCount() != 1 || red.GetExecutionIds()[0] != dead[1] {
		t.Fatalf("operator re-drives globex's: %v %v", red, err)
	}
	left, err := opDLQ.ListDeadLetters(ctx, &sundialv1.ListDeadLettersRequest{})
	if err != nil || len(left.GetDeadLetters()) != 1 || left.GetDeadLetters()[0].GetFiring().GetTenant() != "acme" {
		t.Fatalf("after globex's re-drive: %v %v", left, err)
	}
	var actor string
	if err := api.Pool.QueryRow(ctx, `SELECT actor FROM job_audit WHERE tenant = 'globex' AND action = 'redrive'`).Scan(&actor); err != nil || actor != "platform/oncall" {
		t.Fatalf("redrive audit actor %q (%v)", actor, err)
	}

	// Cross-tenant reads by header; no writes.
	opJobs := sundialv1.NewJobServiceClient(op)
	acmeCtx := metadata.AppendToOutgoingContext(ctx, auth.TenantHeader, "acme")
	if got, err := opJobs.GetJob(acmeCtx, &sundialv1.GetJobRequest{Id: jobs[0].GetId()}); err != nil || got.GetJob().GetTenant() != "acme" {
		t.Fatalf("operator reads acme's job: %v %v", got, err)
	}
	if _, err := opJobs.PauseJob(acmeCtx, &sundialv1.PauseJobRequest{Id: jobs[0].GetId()}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "role operator may not call sundial.v1.JobService/PauseJob") {
		t.Fatalf("operator pauses: %v", err)
	}
	// Over HTTP, the header is Grpc-Metadata-Sundial-Tenant.
	req, _ := http.NewRequest(http.MethodGet, "http://"+api.HTTPAddr+"/v1/jobs/"+jobs[1].GetId(), nil)
	req.Header.Set("Authorization", "Bearer "+apitest.TokenOperator)
	req.Header.Set("Grpc-Metadata-Sundial-Tenant", "globex")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("operator GET globex's job over HTTP: %d", resp.StatusCode)
	}

	// A tenant's token reaches no other tenant, by field or header.
	acmeDLQ := sundialv1.NewDeadLetterServiceClient(dial(t, api, apitest.TokenAcme))
	if _, err := acmeDLQ.ListDeadLetters(ctx, &sundialv1.ListDeadLettersRequest{Tenant: "globex"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("acme naming globex: %v", err)
	}
	if _, err := acmeDLQ.ListDeadLetters(metadata.AppendToOutgoingContext(ctx, auth.TenantHeader, "globex"), &sundialv1.ListDeadLettersRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("acme's header naming globex: %v", err)
	}
	if got, err := acmeDLQ.ListDeadLetters(ctx, &sundialv1.ListDeadLettersRequest{}); err != nil || len(got.GetDeadLetters()) != 1 {
		t.Fatalf("acme's own: %v %v", got, err)
	}

	// Operators make operator tokens only, and they work like the static one.
	opTokens := sundialv1.NewTokenServiceClient(op)
	if _, err := opTokens.CreateToken(ctx, &sundialv1.CreateTokenRequest{Name: "x", Role: sundialv1.Role_ROLE_TENANT_ADMIN}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("operator making an admin token: %v", err)
	}
	tok, secret := createToken(t, opTokens, "night-shift", sundialv1.Role_ROLE_PLATFORM_OPERATOR, 0)
	if tok.GetTenant() != "platform" {
		t.Fatalf("operator token of tenant %q", tok.GetTenant())
	}
	if got, err := sundialv1.NewDeadLetterServiceClient(dial(t, api, secret)).ListDeadLetters(ctx, &sundialv1.ListDeadLettersRequest{}); err != nil || len(got.GetDeadLetters()) != 1 {
		t.Fatalf("api-made operator token: %v %v", got, err)
	}
}

// The token routes of the HTTP/JSON API.
func TestIntegrationTokenRoutesOverHTTP(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	code, _, body := post(t, api, "/v1/tokens", apitest.TokenAcme, []byte(`{"name": "ci", "role": "ROLE_TENANT_READ_ONLY", "ttl": "3600s"}`))
	tok, _ := body["token"].(map[string]any)
	secret, _ := body["secret"].(string)
	if code != http.StatusOK || tok == nil || !strings.HasPrefix(secret, "sdl_") || tok["role"] != "ROLE_TENANT_READ_ONLY" || tok["expire_time"] == nil {
		t.Fatalf("POST /v1/tokens: %d %v", code, body)
	}
	id := tok["id"].(string)
	if code, _, body := post(t, api, "/v1/tokens", apitest.TokenAcme, []byte(`{"name": "x", "role": "ROLE_TENANT_ADMIN", "ttl": "1s"}`)); code != http.StatusBadRequest || !strings.Contains(body["message"].(string), "ttl") {
		t.Fatalf("a 1s ttl: %d %v", code, body)
	}
	if code, _, body := post(t, api, "/v1/tokens", apitest.TokenAcme, nil); code != http.StatusOK || len(body["tokens"].([]any)) != 1 {
		t.Fatalf("GET /v1/tokens: %d %v", code, body)
	}
	if code, _, body := post(t, api, "/v1/tokens/"+id+":revoke", apitest.TokenAcme, []byte(`{}`)); code != http.StatusOK || body["token"].(map[string]any)["revoked_by"] != "acme/ops" {
		t.Fatalf("POST /v1/tokens/{id}:revoke: %d %v", code, body)
	}
	code, _, body = post(t, api, "/v1/tokens:audit", apitest.TokenAcme, nil)
	entries, _ := body["entries"].([]any)
	if code != http.StatusOK || len(entries) != 2 || entries[0].(map[string]any)["action"] != "revoke" {
		t.Fatalf("GET /v1/tokens:audit: %d %v", code, body)
	}
	if code, _, _ := post(t, api, "/v1/tokens", apitest.TokenGlobex, []byte(`{"name": "ci", "role": "ROLE_PLATFORM_OPERATOR"}`)); code != http.StatusForbidden {
		t.Fatalf("an admin making an operator token over HTTP: %d", code)
	}
}
