//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/jobspec"
	"github.com/sundialhq/sundial/pkg/testinfra"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// startAPI builds and runs the real api binary on a fresh schema, Redis
// prefix and ledger keyspace, and returns its gRPC address and a database
// connection for checks. The token "cli-token" is tenant acme, named cli.
func startAPI(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sundial-api")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "..", "services", "api")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the api: %v\n%s", err, out)
	}
	dsn := testinfra.PostgresDSN(t)
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, prefix := testinfra.Redis(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--grpc-addr", addr, "--admin-addr", "127.0.0.1:0", "--postgres-dsn", dsn,
		"--tokens", "cli-token=acme:cli", "--redis-key-prefix", prefix, "--log-format", "text",
		"--cassandra-hosts", strings.Join(testinfra.CassandraHosts(t), ","), "--cassandra-keyspace", testinfra.CassandraKeyspace(t))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	gc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		h, err := healthpb.NewHealthClient(gc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return addr, conn
		}
		select {
		case err := <-exited:
			t.Fatalf("api exited: %v\n%s", err, stderr.String())
		case <-ctx.Done():
			t.Fatalf("api never became SERVING: %v\n%s", err, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// The new subcommands against the real api and database: create with a
// secret header, backfill (dry run and staged), re-drive a dead letter,
// and read the audit trail.
func TestIntegrationCommandsAgainstTheAPI(t *testing.T) {
	addr, conn := startAPI(t)
	ctx := context.Background()
	do := func(args ...string) (string, string) {
		t.Helper()
		var stdout, stderrBuf bytes.Buffer
		cio := cmdIO{Stdout: &stdout, Stderr: &stderrBuf, Now: time.Now, Getenv: func(k string) string {
			return map[string]string{"SUNDIAL_ADDR": addr, "SUNDIAL_TOKEN": "cli-token"}[k]
		}}
		c, rest, ok := resolve(args)
		cmd, known := lookupRemote(c.name)
		if !ok || !known {
			t.Fatalf("no command %q", args)
		}
		code := runRemote(ctx, cio, cmd, rest)
		out, stderr := stdout.String(), stderrBuf.String()
		if code != 0 {
			t.Fatalf("schedctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, stderr)
		}
		return out, stderr
	}
	var dbNow time.Time
	if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}

	out, _ := do("create", "--name", "cli", "--cron", "* * * * *", "--url", "http://127.0.0.1:9/hook",
		"--secret-header", "X-Api-Key=billing_key", "--max-attempts", "2", "-o", "json")
	var job struct {
		ID     string `json:"id"`
		Target struct {
			HTTP struct {
				Headers map[string]string `json:"headers"`
			} `json:"http"`
		} `json:"target"`
	}
	if err := json.Unmarshal([]byte(out), &job); err != nil || job.ID == "" || job.Target.HTTP.Headers["X-Api-Key"] != "{{secret:billing_key}}" {
		t.Fatalf("create -o json: %v\n%s", err, out)
	}

	// The range is relative to this process's clock (the CLI's), kept
	// well inside the past so the database's clock agrees.
	out, stderr := do("backfill", job.ID, "--from", "20m", "--to", "15m", "--dry-run")
	if n := strings.Count(out, "\n") - 1; n < 5 || n > 6 || !strings.Contains(stderr, "nothing staged") {
		t.Fatalf("dry run listed %d slots:\n%s%s", n, out, stderr)
	}
	out, _ = do("backfill", job.ID, "--from", "20m", "--to", "15m", "--rate", "50")
	if !strings.Contains(out, "firing(s) staged") {
		t.Fatalf("backfill: %s", out)
	}
	var staged int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE job_id = $1 AND catch_up`, job.ID).Scan(&staged); err != nil || staged < 5 {
		t.Fatalf("%d backfill rows staged (%v)", staged, err)
	}

	// A dead letter as a worker writes it; list, show, re-drive.
	slot := dbNow.Add(-time.Hour).Truncate(time.Minute)
	execID := firing.ExecutionID(uuid.MustParse(job.ID), slot).String()
	f := jobspec.Envelope(&sundialv1.Job{Id: job.ID, Tenant: "acme", Version: 1}, execID, slot, slot, 2, sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE)
	f.FirstAttempt = 1
	envelope, err := firing.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO dead_letters (execution_id, tenant, job_id, error_class, last_error, http_status, attempts, last_attempt, envelope)
		VALUES ($1, 'acme', $2, 'http_5xx', 'HTTP 502 from target', 502, 2, 2, $3)`, execID, job.ID, envelope); err != nil {
		t.Fatal(err)
	}
	out, _ = do("dlq", "list", "--job", job.ID, "--class", "http_5xx", "--since", "1h")
	if !strings.Contains(out, execID) || !strings.Contains(out, "502") {
		t.Fatalf("dlq list:\n%s", out)
	}
	out, _ = do("dlq", "show", execID)
	if !strings.Contains(out, "HTTP 502 from target") {
		t.Fatalf("dlq show:\n%s", out)
	}
	_, stderr = do("dlq", "redrive", "--job", job.ID, "--dry-run")
	if !strings.Contains(stderr, "dry run: 1 dead letter(s)") {
		t.Fatalf("dry-run re-drive: %s", stderr)
	}
	out, _ = do("dlq", "redrive", execID, "--rate", "5")
	if strings.TrimSpace(out) != execID {
		t.Fatalf("re-drive printed %q", out)
	}
	var attempt int
	if err := conn.QueryRow(ctx, `SELECT attempt FROM outbox WHERE execution_id = $1`, execID).Scan(&attempt); err != nil || attempt != 3 {
		t.Fatalf("re-driven attempt %d (%v), want 3", attempt, err)
	}
	out, _ = do("dlq", "list", "--job", job.ID)
	if strings.Contains(out, execID) {
		t.Fatalf("re-driven dead letter still listed:\n%s", out)
	}

	out, _ = do("audit", job.ID)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "redrive") || !strings.Contains(lines[2], "backfill") || !strings.Contains(lines[3], "create") ||
		!strings.Contains(out, "acme/cli") {
		t.Fatalf("audit:\n%s", out)
	}
	if strings.Contains(out, "billing_key") {
		t.Fatalf("the audit trail shows a header value:\n%s", out)
	}
}
