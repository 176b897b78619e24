//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// TestAPIBothPortsInTheSuiteMode reads a job created over gRPC back through
// the HTTP/JSON API, each port secured as the suite runs (SUNDIAL_E2E_TLS),
// with the clients a caller of a deployment would use: the platform's CA
// verifying the api, and a client certificate under mtls. Under TLS a
// plaintext client is refused on both ports, so the rest of the suite
// cannot pass over a port that quietly fell back to plaintext.
func TestAPIBothPortsInTheSuiteMode(t *testing.T) {
	t.Parallel()
	httpAddr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p := newPlatform(t, "--http-addr", httpAddr)
	ctx := ctxT(t, time.Minute)
	created, err := p.client().CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{
		Name:     "read-back-over-http",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(time.Now().Add(time.Hour).Truncate(time.Second))}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:9/never"}}},
	}})
	if err != nil {
		t.Fatalf("CreateJob over gRPC (%s): %v", tlsMode, err)
	}
	id := created.GetJob().GetId()

	hc, err := p.plat.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	url := p.plat.URL(httpAddr) + "/v1/jobs/" + id
	status, body, err := httpGet(ctx, hc, url, "e2e-token")
	if err != nil || status != http.StatusOK || !strings.Contains(body, id) {
		t.Fatalf("GET %s (%s): %d %v %.200s", url, tlsMode, status, err, body)
	}
	if tlsMode == harness.Plaintext {
		return
	}

	// A client that does not speak TLS gets nothing from either port.
	conn, err := grpc.NewClient(p.grpcAddr(t),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.Bearer("e2e-token")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := sundialv1.NewJobServiceClient(conn).GetJob(short, &sundialv1.GetJobRequest{Id: id}); err == nil {
		t.Fatal("GetJob over plaintext gRPC answered by a TLS api")
	}
	status, body, err = httpGet(ctx, http.DefaultClient, "http://"+httpAddr+"/v1/jobs/"+id, "e2e-token")
	if err == nil && (status == http.StatusOK || strings.Contains(body, id)) {
		t.Fatalf("GET over plain HTTP answered by a TLS api: %d %.200s", status, body)
	}
}

// grpcAddr is the address of the platform's api, for a client of the
// test's own.
func (p *platform) grpcAddr(t *testing.T) string {
	t.Helper()
	conn, err := p.plat.Conn()
	if err != nil {
		t.Fatal(err)
	}
	return conn.Target()
}

func httpGet(ctx context.Context, hc *http.Client, url, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
