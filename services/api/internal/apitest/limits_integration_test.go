//go:build integration

package apitest_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/services/api/internal/ratelimit"
	"github.com/sundialhq/sundial/services/api/internal/server"
)

// dial is a raw gRPC connection to api as token's caller.
func dial(t *testing.T, api *apitest.API, token string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(api.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.Bearer(token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// post sends body to the HTTP/JSON API as token and returns the status,
// the headers and the decoded google.rpc.Status of an error.
func post(t *testing.T, api *apitest.API, path, token string, body []byte) (int, http.Header, map[string]any) {
	t.Helper()
	method := http.MethodPost
	if body == nil {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, "http://"+api.HTTPAddr+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, resp.Header, out
}

func cronJob(name string) *sundialv1.Job {
	return &sundialv1.Job{Name: name,
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@hourly"}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:9/hook"}}}}
}

// The per-token request rate limit on the real api (real Postgres and
// Redis behind it), over gRPC and HTTP: a token that spent its burst is
// refused with ResourceExhausted carrying RetryInfo (429 with Retry-After
// over HTTP) before anything is written; another tenant's token, and health
// checks, are not affected; after the retry delay the token gets through.
func TestIntegrationRequestRateLimit(t *testing.T) {
	clk := clock.NewFake(time.Now())
	api := apitest.Start(t, apitest.Options{RateLimit: ratelimit.Config{PerSecond: 1, Burst: 3}, RateClock: clk})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acme := sundialv1.NewJobServiceClient(dial(t, api, apitest.TokenAcme))
	globex := sundialv1.NewJobServiceClient(dial(t, api, apitest.TokenGlobex))

	for i := range 3 {
		if _, err := acme.ListJobs(ctx, &sundialv1.ListJobsRequest{}); err != nil {
			t.Fatalf("call %d of the burst: %v", i, err)
		}
	}
	_, err := acme.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: cronJob("refused")})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("past the burst: %v, want ResourceExhausted", err)
	}
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.QuotaFailure:
			quota = d
		}
	}
	if retry.GetRetryDelay().AsDuration() != time.Second {
		t.Fatalf("RetryInfo %v, want 1s (one call a second, the burst just spent)", retry)
	}
	if len(quota.GetViolations()) != 1 || quota.GetViolations()[0].GetSubject() != "caller:acme/ops" {
		t.Fatalf("QuotaFailure %v, want the caller acme/ops", quota)
	}
	if strings.Contains(st.Message(), apitest.TokenAcme) {
		t.Fatal("the refusal quotes the token")
	}

	// Another tenant has a bucket of its own; health checks are free.
	if _, err := globex.ListJobs(ctx, &sundialv1.ListJobsRequest{}); err != nil {
		t.Fatalf("globex refused by acme's limit: %v", err)
	}
	health := healthpb.NewHealthClient(dial(t, api, ""))
	for range 10 {
		if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("health check: %v", err)
		}
	}

	// Over HTTP the same bucket answers 429 with Retry-After and the
	// status's details.
	code, hdr, body := post(t, api, "/v1/jobs", apitest.TokenAcme, nil)
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "1" {
		t.Fatalf("HTTP past the burst: %d, Retry-After %q, want 429 and 1", code, hdr.Get("Retry-After"))
	}
	if !strings.Contains(mustJSON(t, body["details"]), "google.rpc.RetryInfo") {
		t.Fatalf("HTTP error details %v carry no RetryInfo", body["details"])
	}

	// A refused call spent nothing, and wrote nothing: after the delay the
	// token is served and has no job.
	clk.Advance(retry.GetRetryDelay().AsDuration())
	resp, err := acme.ListJobs(ctx, &sundialv1.ListJobsRequest{})
	if err != nil {
		t.Fatalf("after the retry delay: %v", err)
	}
	if len(resp.GetJobs()) != 0 {
		t.Fatalf("a refused CreateJob wrote %d jobs", len(resp.GetJobs()))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The request size limits on the real api: a payload over the job limit
// (256 KiB) is InvalidArgument naming payload however large the message,
// up to the gRPC message limit (16 MiB); a message over that is refused by
// the transport with ResourceExhausted; over HTTP a payload over the job
// limit is a 400 naming payload, and a body over 4 MiB a 400 saying so,
// refused without being read whole. Nothing refused is written.
func TestIntegrationRequestSizeLimits(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acme := sundialv1.NewJobServiceClient(dial(t, api, apitest.TokenAcme))

	for _, size := range []int{jobspec.MaxPayloadBytes + 1, 8 << 20} {
		j := cronJob("big")
		j.Payload = make([]byte, size)
		_, err := acme.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: j})
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !badRequestNames(st, "payload") {
			t.Fatalf("payload of %d bytes: %v, want InvalidArgument naming payload", size, err)
		}
	}
	j := cronJob("huge")
	j.Payload = make([]byte, server.MaxRequestBytes+1)
	if _, err := acme.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: j}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("message over %d bytes: %v, want ResourceExhausted", server.MaxRequestBytes, err)
	}

	// HTTP: the payload travels as base64 in JSON.
	big := `{"job": {"name": "big", "schedule": {"cron": "@hourly"}, "target": {"http": {"url": "http://127.0.0.1:9/hook"}}, "payload": "` +
		base64.StdEncoding.EncodeToString(make([]byte, jobspec.MaxPayloadBytes+1)) + `"}}`
	code, _, body := post(t, api, "/v1/jobs", apitest.TokenAcme, []byte(big))
	if code != http.StatusBadRequest || !strings.Contains(mustJSON(t, body), `"field":"payload"`) {
		t.Fatalf("HTTP payload over the job limit: %d %v, want 400 naming payload", code, body)
	}
	huge := `{"job": {"name": "huge", "payload": "` + strings.Repeat("A", 5<<20) + `"}}`
	code, _, body = post(t, api, "/v1/jobs", apitest.TokenAcme, []byte(huge))
	if msg, _ := body["message"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "request body too large") {
		t.Fatalf("HTTP body over 4 MiB: %d %v, want 400 saying the body is too large", code, body)
	}

	resp, err := acme.ListJobs(ctx, &sundialv1.ListJobsRequest{})
	if err != nil || len(resp.GetJobs()) != 0 {
		t.Fatalf("after refusals: %d jobs, %v", len(resp.GetJobs()), err)
	}
}

func badRequestNames(st *status.Status, field string) bool {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == field {
					return true
				}
			}
		}
	}
	return false
}
