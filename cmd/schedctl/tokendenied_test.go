package main

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func (f *fakeTokens) ListAccessDenied(_ context.Context, req *sundialv1.ListAccessDeniedRequest) (*sundialv1.ListAccessDeniedResponse, error) {
	resp := &sundialv1.ListAccessDeniedResponse{Entries: []*sundialv1.AccessDeniedEntry{
		{Time: timestamppb.New(fakeNow), Code: "Unauthenticated", Method: "/sundial.v1.JobService/ListJobs", Source: "192.0.2.7", Fingerprint: "40a3ccee0d89", Suppressed: 990},
		{Time: timestamppb.New(fakeNow), Code: "PermissionDenied", Method: "/sundial.v1.JobService/DeleteJob", Source: "10.0.4.2", Tenant: "acme", Actor: "acme/viewer", TokenId: "3f9a1c0777b0e4d2"},
	}}
	if req.GetPageSize() == 1 {
		resp.Entries, resp.NextPageToken = resp.Entries[:1], "MQ"
	}
	return resp, nil
}

func TestTokenDenied(t *testing.T) {
	_, addr := startFake(t)
	code, out, _ := run(t, addr, nil, "token denied")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "TIME") ||
		!strings.Contains(lines[1], "fp:40a3ccee0d89") || !strings.Contains(lines[1], "+990") || !strings.Contains(lines[1], "192.0.2.7") ||
		!strings.Contains(lines[2], "acme/viewer") || !strings.Contains(lines[2], "3f9a1c0777b0e4d2") {
		t.Fatalf("denied: %d\n%s", code, out)
	}
	code, _, stderr := run(t, addr, nil, "token denied", "--page-size", "1")
	if code != 0 || !strings.Contains(stderr, "more: --page-token MQ") {
		t.Fatalf("paged: %d %q", code, stderr)
	}
	if code, _, _ := run(t, addr, nil, "token denied", "extra"); code != 2 {
		t.Fatalf("an argument: %d", code)
	}
}
