//go:build integration

package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/services/api/internal/tokens"
)

// The console with an api-made read-only token: it signs in and reads,
// every change is refused with 403 naming the role, and once the token is
// revoked its session ends within the revocation bound.
func TestIntegrationConsoleReadOnlyTokenAndRevocation(t *testing.T) {
	api := startConsole(t, false)
	ctx := context.Background()
	conn, err := grpc.NewClient(api.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(auth.Bearer(apitest.TokenAcme)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	job, err := sundialv1.NewJobServiceClient(conn).CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{Name: "nightly",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@hourly"}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:9/hook"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	made, err := sundialv1.NewTokenServiceClient(conn).CreateToken(ctx, &sundialv1.CreateTokenRequest{Name: "viewer", Role: sundialv1.Role_ROLE_TENANT_READ_ONLY})
	if err != nil {
		t.Fatal(err)
	}

	viewer := newBrowser(t, api)
	viewer.signIn(made.GetSecret())
	jobPath := "/jobs/" + job.GetJob().GetId()
	code, page, _ := viewer.do("GET", jobPath, nil)
	if code != http.StatusOK || !strings.Contains(page, "nightly") {
		t.Fatalf("read-only job page: %d", code)
	}
	code, body, _ := viewer.do("POST", jobPath+"/pause", url.Values{"csrf": {csrf(t, page)}, "confirm": {"yes"}})
	if code != http.StatusForbidden || !strings.Contains(body, "read-only may not call") {
		t.Fatalf("read-only pause: %d %s", code, body)
	}
	got, err := sundialv1.NewJobServiceClient(conn).GetJob(ctx, &sundialv1.GetJobRequest{Id: job.GetJob().GetId()})
	if err != nil || got.GetJob().GetStatus() != sundialv1.JobStatus_JOB_STATUS_ACTIVE {
		t.Fatalf("after the refused pause: %v %v", got.GetJob().GetStatus(), err)
	}

	if _, err := sundialv1.NewTokenServiceClient(conn).RevokeToken(ctx, &sundialv1.RevokeTokenRequest{Id: made.GetToken().GetId()}); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for {
		code, _, h := viewer.do("GET", "/jobs", nil)
		if code == http.StatusSeeOther && strings.HasPrefix(h.Get("Location"), "/login") {
			break
		}
		if time.Since(revoked) > tokens.RevocationBound {
			t.Fatalf("the revoked token's session still answers %d after %s", code, time.Since(revoked))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The ended session's row is gone: the console deleted it on the
	// first request the token no longer resolved for.
	if n := sessionRows(t, api.Pool, `token_id = $1`, made.GetToken().GetId()); n != 0 {
		t.Fatalf("%d session rows of the revoked token", n)
	}
}
