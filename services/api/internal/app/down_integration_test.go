//go:build integration

package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/logbuf"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// downAPI is an api started in process for a startup test.
type downAPI struct {
	t        *testing.T
	app      *App
	logs     *logbuf.Buffer
	jobs     sundialv1.JobServiceClient
	health   healthpb.HealthClient
	httpAddr string
	// stop stops the api (again at cleanup: a no-op). A test stops it
	// before the forwarders it opened close, so no client is left
	// reconnecting to them.
	stop func()
}

// startAPI composes and starts the api with args (beside its tokens,
// ports and Redis) and fails the test when that took more than a few
// seconds: a store that does not answer is waited for in the background.
func startAPI(t *testing.T, args ...string) *downAPI {
	t.Helper()
	grpcAddr, httpAddr := testinfra.UnusedAddr(t), testinfra.UnusedAddr(t)
	_, prefix := testinfra.Redis(t)
	var cfg Config
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.Register(fs)
	require.NoError(t, config.Load(fs, append([]string{"--tokens", "t=acme", "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--redis-addr", testinfra.RedisAddr(t), "--redis-key-prefix", prefix}, args...),
		func(string) (string, bool) { return "", false }))
	var p config.Problems
	cfg.Validate(&p)
	require.NoError(t, p.Err())

	logs := &logbuf.Buffer{}
	t0 := time.Now()
	a, err := New(context.Background(), cfg, Deps{Logger: slog.New(slog.NewTextHandler(logs, nil)), Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	g := &lifecycle.Group{}
	g.Add(a.Services...)
	require.NoError(t, g.Start(context.Background()))
	t.Cleanup(g.Stop)
	require.Less(t, time.Since(t0), 12*time.Second, "start took too long")

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &downAPI{t: t, app: a, logs: logs, jobs: sundialv1.NewJobServiceClient(conn), health: healthpb.NewHealthClient(conn), httpAddr: httpAddr, stop: g.Stop}
}

func (d *downAPI) check(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return d.app.Checks[name](ctx)
}

func (d *downAPI) createJob() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := d.jobs.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@hourly"}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "t"}}},
	}}, grpc.PerRPCCredentials(auth.Bearer("t")))
	return resp.GetJob().GetId(), err
}

func (d *downAPI) listExecutions(jobID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := d.jobs.ListExecutions(ctx, &sundialv1.ListExecutionsRequest{JobId: jobID}, grpc.PerRPCCredentials(auth.Bearer("t")))
	return err
}

// serving is what the gRPC health service answers for the JobService.
func (d *downAPI) serving() healthpb.HealthCheckResponse_ServingStatus {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := d.health.Check(ctx, &healthpb.HealthCheckRequest{Service: sundialv1.JobService_ServiceDesc.ServiceName})
	require.NoError(d.t, err)
	return resp.GetStatus()
}

// httpJobs is the status of GET /v1/jobs and its body.
func (d *downAPI) httpJobs() (int, string) {
	req, err := http.NewRequest("GET", "http://"+d.httpAddr+"/v1/jobs", nil)
	require.NoError(d.t, err)
	req.Header.Set("Authorization", "Bearer t")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(d.t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// An api whose Postgres does not answer starts within seconds, says in
// its log and in its postgres readiness check that it waits for Postgres,
// and answers calls Unavailable (HTTP 503) naming Postgres, its gRPC
// health NOT_SERVING; when Postgres answers at that address (a forwarder
// to the real one) it migrates and serves without a restart, SERVING.
func TestAPIStartsWhilePostgresIsDownAndServesWhenItAnswers(t *testing.T) {
	u, err := url.Parse(testinfra.PostgresDSN(t))
	require.NoError(t, err)
	real, addr := u.Host, testinfra.UnusedAddr(t)
	u.Host = addr
	d := startAPI(t, "--postgres-dsn", u.String(),
		"--cassandra-hosts", strings.Join(testinfra.CassandraHosts(t), ","), "--cassandra-keyspace", testinfra.CassandraKeyspace(t))

	require.ErrorContains(t, d.check("postgres"), "waiting for postgres: postgres: ")
	require.NoError(t, d.check("cassandra"), "only postgres is down")
	require.Contains(t, d.logs.String(), `starting anyway and waiting for it" err="postgres: `)
	_, err = d.createJob()
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "waiting for postgres")
	code, body := d.httpJobs()
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, "waiting for postgres")
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, d.serving(), "gRPC health while every call answers Unavailable")

	testinfra.Forward(t, addr, real)
	require.Eventually(t, func() bool { return d.check("postgres") == nil }, 30*time.Second, 100*time.Millisecond,
		"postgres ready once it answers:\n%s", d.logs.String())
	require.Eventually(t, func() bool { return d.serving() == healthpb.HealthCheckResponse_SERVING }, 5*time.Second, 50*time.Millisecond,
		"gRPC health SERVING once postgres is ready")
	_, err = d.createJob()
	require.NoError(t, err)
	code, body = d.httpJobs()
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, d.logs.String(), "postgres answers: prepared")
	d.stop()
}

// With --migrate-on-start, an api whose Cassandra does not answer starts
// within seconds, its cassandra readiness check naming it; jobs are
// served, history calls answer Unavailable, and when Cassandra answers at
// that address the ledger's schema is made and history is served.
func TestAPIStartsWhileCassandraIsDownAndMigratesWhenItAnswers(t *testing.T) {
	addr := testinfra.UnusedAddr(t)
	d := startAPI(t, "--postgres-dsn", testinfra.PostgresDSN(t),
		"--cassandra-hosts", addr, "--cassandra-keyspace", testinfra.CassandraKeyspace(t))

	require.ErrorContains(t, d.check("cassandra"), "waiting for cassandra: ")
	require.NoError(t, d.check("postgres"), "only cassandra is down")
	require.Contains(t, d.logs.String(), "starting anyway and waiting for it")
	id, err := d.createJob()
	require.NoError(t, err)
	err = d.listExecutions(id)
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)

	testinfra.Forward(t, addr, testinfra.CassandraHosts(t)[0])
	require.Eventually(t, func() bool { return d.check("cassandra") == nil }, 60*time.Second, 200*time.Millisecond,
		"cassandra ready once it answers:\n%s", d.logs.String())
	require.Contains(t, d.logs.String(), "ledger schema is up to date")
	require.Eventually(t, func() bool { return status.Code(d.listExecutions(id)) != codes.Unavailable }, 30*time.Second, 200*time.Millisecond,
		"history served once cassandra answers")
	d.stop()
}
