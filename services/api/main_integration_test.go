//go:build integration

package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// freshSchema creates an empty schema of the test's own (dropped when the
// test ends) and returns a DSN whose search_path is it, a connection for
// checks, and the schema's name.
func freshSchema(t *testing.T) (string, *pgx.Conn, string) {
	t.Helper()
	dsn := testinfra.PostgresDSN(t)
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	// Registered after the schema's drop, so it runs first.
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	var schema string
	if err := conn.QueryRow(context.Background(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	return dsn, conn, schema
}

// built is the api binary, built once for every test of the run: a link
// of the whole api takes longer than some of the tests.
var built struct {
	once sync.Once
	bin  string
	out  []byte
	err  error
}

// buildBinary builds the api on first use and returns its path; it is
// removed when the run ends (atExit).
func buildBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "sundial-api-test")
		if err != nil {
			built.err = err
			return
		}
		atExit = append(atExit, func() { _ = os.RemoveAll(dir) })
		built.bin = filepath.Join(dir, "sundial-api")
		built.out, built.err = exec.Command("go", "build", "-o", built.bin, ".").CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("go build: %v\n%s", built.err, built.out)
	}
	return built.bin
}

func tablesIn(t *testing.T, conn *pgx.Conn, schema string) map[string]bool {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT table_name FROM information_schema.tables WHERE table_schema = $1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

func TestMigrateBinary(t *testing.T) {
	bin := buildBinary(t)
	dsn, conn, schema := freshSchema(t)
	if got := tablesIn(t, conn, schema); len(got) != 0 {
		t.Fatalf("schema not empty: %v", got)
	}
	keyspace := testinfra.CassandraKeyspace(t)
	hosts := strings.Join(testinfra.CassandraHosts(t), ",")
	for run := range 2 { // the second run finds nothing to do
		var stderr bytes.Buffer
		cmd := exec.Command(bin, "migrate", "--postgres-dsn", dsn, "--log-format", "text",
			"--cassandra-hosts", hosts, "--cassandra-keyspace", keyspace)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("migrate run %d: %v\n%s", run, err, stderr.String())
		}
		if !bytes.Contains(stderr.Bytes(), []byte("ledger schema is up to date")) {
			t.Fatalf("migrate run %d said:\n%s", run, stderr.String())
		}
	}
	got := tablesIn(t, conn, schema)
	for _, want := range []string{"jobs", "outbox", "leader_epochs", "goose_db_version"} {
		if !got[want] {
			t.Errorf("table %s missing after migrate; have %v", want, got)
		}
	}

	cass := testinfra.CassandraCluster(t)
	cass.Keyspace = keyspace
	sess := testinfra.CassandraSession(t, cass)
	for _, table := range []string{ledger.TableByJob, ledger.TableByID} {
		var n int
		if err := sess.Query(`SELECT count(*) FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`, keyspace, table).Scan(&n); err != nil || n != 1 {
			t.Errorf("ledger table %s.%s after migrate: count %d, err %v", keyspace, table, n, err)
		}
	}

	// An unreachable database is a failure, not a hang.
	cmd := exec.Command(bin, "migrate", "--postgres-dsn", "postgres://nobody:x@127.0.0.1:1/none?sslmode=disable&connect_timeout=2", "--timeout", "20s")
	if err := cmd.Run(); err == nil {
		t.Fatal("migrate against nothing succeeded")
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestServeBinary runs the api as a process: it migrates on start, serves
// health and authenticated calls (JobService and DeadLetterService, with
// the quotas of its --quotas-file), and drains on SIGTERM with exit 0.
func TestServeBinary(t *testing.T) {
	bin := buildBinary(t)
	dsn, conn, schema := freshSchema(t)
	grpcAddr, adminAddr, httpAddr := freePort(t), freePort(t), freePort(t)
	quotas := filepath.Join(t.TempDir(), "quotas.yaml")
	if err := os.WriteFile(quotas, []byte("tenants:\n  acme: {max_jobs: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin,
		"--grpc-addr", grpcAddr, "--admin-addr", adminAddr, "--http-addr", httpAddr, "--postgres-dsn", dsn,
		"--tokens", "bin-token=acme", "--log-format", "text", "--quotas-file", quotas,
		"--cassandra-hosts", strings.Join(testinfra.CassandraHosts(t), ","), "--cassandra-keyspace", testinfra.CassandraKeyspace(t))
	_, prefix := testinfra.Redis(t)
	cmd.Env = append(os.Environ(), "SUNDIAL_REDIS_KEY_PREFIX="+prefix)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	gc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Wait for SERVING; WaitForReady rides out the start-up.
	for {
		h, err := healthpb.NewHealthClient(gc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("api exited: %v\n%s", err, stderr.String())
		case <-ctx.Done():
			t.Fatalf("api never became SERVING: %v\n%s", err, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !tablesIn(t, conn, schema)["jobs"] {
		t.Fatal("--migrate-on-start did not create the schema")
	}
	client := sundialv1.NewJobServiceClient(gc)
	hourly := &sundialv1.CreateJobRequest{Job: &sundialv1.Job{
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@hourly"}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "t"}}},
	}}
	token := grpc.PerRPCCredentials(auth.Bearer("bin-token"))
	resp, err := client.CreateJob(ctx, hourly, token)
	if err != nil || resp.GetJob().GetTenant() != "acme" {
		t.Fatalf("CreateJob through the binary: %v %v", resp, err)
	}
	if _, err := client.CreateJob(ctx, hourly, token); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second job over the quotas file's max_jobs 1: %v", err)
	}
	audit, err := client.ListJobAudit(ctx, &sundialv1.ListJobAuditRequest{Id: resp.GetJob().GetId()}, token)
	if err != nil || len(audit.GetEntries()) != 1 || audit.GetEntries()[0].GetActor() != "acme/token:"+auth.Fingerprint("bin-token") {
		t.Fatalf("audit through the binary: %v %v", audit, err)
	}
	dl, err := sundialv1.NewDeadLetterServiceClient(gc).ListDeadLetters(ctx, &sundialv1.ListDeadLettersRequest{}, token)
	if err != nil || len(dl.GetDeadLetters()) != 0 {
		t.Fatalf("DeadLetterService through the binary: %v %v", dl, err)
	}
	// --http-addr: the same job over HTTP/JSON, with the same token.
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+httpAddr+"/v1/jobs/"+resp.GetJob().GetId(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer bin-token")
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("HTTP API through the binary: %v", err)
	}
	body, _ := io.ReadAll(hr.Body)
	_ = hr.Body.Close()
	if hr.StatusCode != 200 || !strings.Contains(string(body), resp.GetJob().GetId()) {
		t.Fatalf("GET /v1/jobs/ID through the binary: %d %s", hr.StatusCode, body)
	}
	if h, err := healthpb.NewHealthClient(gc).Check(ctx, &healthpb.HealthCheckRequest{Service: sundialv1.DeadLetterService_ServiceDesc.ServiceName}); err != nil ||
		h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("DeadLetterService health: %v %v", h, err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("api exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("api did not stop on SIGTERM\n%s", stderr.String())
	}
}

func TestRefusesToStartWithoutTokens(t *testing.T) {
	bin := buildBinary(t)
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--grpc-addr", freePort(t), "--admin-addr", freePort(t))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !bytes.Contains(stderr.Bytes(), []byte("tokens")) {
		t.Fatalf("start without tokens: %v\n%s", err, stderr.String())
	}
}
