//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// startAPI builds and runs the real api binary on a fresh schema, Redis
// prefix and ledger keyspace, and returns its gRPC address, a database
// connection for checks and the ledger keyspace (its tables created by the
// api). The token "cli-token" is tenant acme, named cli.
func startAPI(t *testing.T) (addr string, conn *pgx.Conn, keyspace string) {
	t.Helper()
	return startAPIWith(t)
}

// startAPIWith is startAPI with more flags for the api (quotas).
func startAPIWith(t *testing.T, extra ...string) (addr string, conn *pgx.Conn, keyspace string) {
	t.Helper()
	bin := apiBinary(t)
	dsn := testinfra.PostgresDSN(t)
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, prefix := testinfra.Redis(t)
	keyspace = testinfra.CassandraKeyspace(t)
	// acme's target secrets, which the api reads for their names only:
	// a job may reference billing_key.
	secretsDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(secretsDir, "acme"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secretsDir, "acme", "billing_key"), []byte("unused"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Per-tenant signing keys on (SigningKeyService).
	kekFile := filepath.Join(t.TempDir(), "kek")
	if err := os.WriteFile(kekFile, []byte(strings.Repeat("k", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--postgres-dsn", dsn,
		"--tokens", "cli-token=acme:cli", "--redis-key-prefix", prefix, "--log-format", "text",
		"--cassandra-hosts", strings.Join(testinfra.CassandraHosts(t), ","), "--cassandra-keyspace", keyspace,
		"--secrets-dir", secretsDir, "--signing-key-encryption-key-file", kekFile}
	args = append(args, extra...)
	// The addresses were free a moment ago; another process may take one
	// before the api binds it. That lost race, and only it, is retried.
	for attempt := 1; ; attempt++ {
		addr, inUse := runAPI(t, bin, args)
		if !inUse {
			return addr, conn, keyspace
		}
		if attempt == 3 {
			t.Fatalf("api lost the race for a free port %d times", attempt)
		}
	}
}

// freeAddrs returns n distinct loopback addresses that were free a moment
// ago: every listener is held until all are chosen, so the kernel cannot
// hand out one port twice.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs
}

// runAPI starts the api with args on fresh gRPC and admin addresses and
// waits until it serves. It returns the gRPC address, or inUse when the
// api exited because an address was taken meanwhile.
func runAPI(t *testing.T, bin string, args []string) (addr string, inUse bool) {
	t.Helper()
	addrs := freeAddrs(t, 2)
	addr = addrs[0]
	var stderr bytes.Buffer
	cmd := exec.Command(bin, append([]string{"--grpc-addr", addr, "--admin-addr", addrs[1]}, args...)...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// exited is closed when the api has exited (waitErr says how), so the
	// start loop below and the cleanup can both see it: a value sent on a
	// channel would be taken by one and leave the other waiting forever.
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
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
			return addr, false
		}
		select {
		case <-exited:
			if strings.Contains(stderr.String(), "address already in use") {
				t.Logf("api lost an address to another process, starting again: %v", waitErr)
				return "", true
			}
			t.Fatalf("api exited: %v\n%s", waitErr, stderr.String())
		case <-ctx.Done():
			t.Fatalf("api never became SERVING: %v\n%s", err, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// apiBuild is the api binary, built once for every test of the run: the
// build, a link of the whole api, took longer than most of the tests.
var apiBuild struct {
	once sync.Once
	bin  string
	out  []byte
	err  error
}

// apiBinary builds the api on first use and returns its path; it is
// removed when the run ends (atExit).
func apiBinary(t *testing.T) string {
	t.Helper()
	apiBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "schedctl-test-api")
		if err != nil {
			apiBuild.err = err
			return
		}
		atExit = append(atExit, func() { _ = os.RemoveAll(dir) })
		apiBuild.bin = filepath.Join(dir, "sundial-api")
		build := exec.Command("go", "build", "-o", apiBuild.bin, ".")
		build.Dir = filepath.Join("..", "..", "services", "api")
		apiBuild.out, apiBuild.err = build.CombinedOutput()
	})
	if apiBuild.err != nil {
		t.Fatalf("build the api: %v\n%s", apiBuild.err, apiBuild.out)
	}
	return apiBuild.bin
}

// schedctlAt runs remote subcommands in-process against the api at addr
// as tenant acme; a non-zero exit fails the test. It returns stdout and
// stderr.
func schedctlAt(t *testing.T, addr string) func(args ...string) (string, string) {
	return func(args ...string) (string, string) {
		t.Helper()
		var stdout, stderrBuf bytes.Buffer
		cio := cmdIO{Stdout: &stdout, Stderr: &stderrBuf, Now: time.Now, Getenv: func(k string) string {
			return map[string]string{"SUNDIAL_ADDR": addr, "SUNDIAL_TOKEN": "cli-token"}[k]
		}}
		c, rest, ok := resolve(args)
		if !ok || !c.run.remote() {
			t.Fatalf("no command %q", args)
		}
		code := c.invoke(context.Background(), &env{io: cio, now: cio.now}, rest)
		out, stderr := stdout.String(), stderrBuf.String()
		if code != 0 {
			t.Fatalf("schedctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, stderr)
		}
		return out, stderr
	}
}

// The new subcommands against the real api and database: create with a
// secret header, backfill (dry run and staged), re-drive a dead letter,
// and read the audit trail.
func TestIntegrationCommandsAgainstTheAPI(t *testing.T) {
	addr, conn, _ := startAPI(t)
	ctx := context.Background()
	do := schedctlAt(t, addr)
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
	f := firing.New(&sundialv1.Job{Id: job.ID, Tenant: "acme", Version: 1}, firing.Attempt{
		Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE, ExecutionID: execID,
		Scheduled: slot, Fire: slot, Number: 2, FirstAttempt: 1,
	})
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

// fields reads printJob's "Field  value" lines (names have single spaces,
// columns are at least two apart).
func fields(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimRight(out, "\n"), "\n") {
		k, v, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("not a field line: %q in\n%s", line, out)
		}
		m[k] = strings.TrimSpace(v)
	}
	return m
}

// cells splits a table's lines into cells (no cell holds two spaces in a
// row, and none is empty: empty values print as "-").
func cells(out string) [][]string {
	var rows [][]string
	for line := range strings.SplitSeq(strings.TrimRight(out, "\n"), "\n") {
		rows = append(rows, regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1))
	}
	return rows
}

// decode reads -o json output: the protobuf JSON mapping.
func decode(t *testing.T, out string, m proto.Message) {
	t.Helper()
	if err := protojson.Unmarshal([]byte(out), m); err != nil {
		t.Fatalf("not %T JSON: %v\n%s", m, err, out)
	}
}

// get, pause, resume, delete, history and server-preview against the real
// api, its database and its ledger, each in both output formats.
func TestIntegrationJobCommandsAgainstTheAPI(t *testing.T) {
	addr, conn, keyspace := startAPI(t)
	ctx := context.Background()
	do := schedctlAt(t, addr)
	dbNow := func() time.Time {
		t.Helper()
		var now time.Time
		if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
	stored := func(id string) (status string, version int64) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT status, version FROM jobs WHERE id = $1`, id).Scan(&status, &version); err != nil {
			t.Fatal(err)
		}
		return status, version
	}
	onFiveMinutes := func(ts *timestamppb.Timestamp) bool {
		return ts != nil && ts.AsTime().Equal(ts.AsTime().Truncate(5*time.Minute))
	}

	out, _ := do("create", "--name", "nightly", "--cron", "*/5 * * * *", "--url", "http://127.0.0.1:9/hook",
		"--label", "team=ops", "--max-attempts", "3", "-o", "json")
	var created sundialv1.Job
	decode(t, out, &created)
	id := created.GetId()

	// get: the table and the JSON.
	out, _ = do("get", id)
	f := fields(t, out)
	for k, v := range map[string]string{
		"ID": id, "Name": "nightly", "Status": "active (version 1)", "Schedule": "*/5 * * * *",
		"Target": "POST http://127.0.0.1:9/hook", "Labels": "team=ops", "Next fire": instant(created.GetNextFireTime()),
	} {
		if f[k] != v {
			t.Errorf("get: %s is %q, want %q", k, f[k], v)
		}
	}
	if !strings.HasPrefix(f["Retry"], "3 attempt(s)") || !onFiveMinutes(created.GetNextFireTime()) {
		t.Errorf("get: retry %q, next fire %v\n%s", f["Retry"], created.GetNextFireTime(), out)
	}
	out, _ = do("get", id, "-o", "json")
	var got sundialv1.Job
	decode(t, out, &got)
	if got.GetId() != id || got.GetName() != "nightly" || got.GetStatus() != sundialv1.JobStatus_JOB_STATUS_ACTIVE || got.GetVersion() != 1 ||
		got.GetLabels()["team"] != "ops" || got.GetSchedule().GetCron() != "*/5 * * * *" || !got.GetNextFireTime().AsTime().Equal(created.GetNextFireTime().AsTime()) {
		t.Errorf("get -o json:\n%s", out)
	}

	// pause, and pause again: a paused job stays as it is.
	out, _ = do("pause", id)
	if want := "job " + id + " paused: status paused, version 2, next fire -\n"; out != want {
		t.Errorf("pause printed %q, want %q", out, want)
	}
	out, _ = do("pause", id, "-o", "json")
	decode(t, out, &got)
	if got.GetStatus() != sundialv1.JobStatus_JOB_STATUS_PAUSED || got.GetVersion() != 2 || got.GetNextFireTime() != nil {
		t.Errorf("pause -o json of a paused job:\n%s", out)
	}
	if s, v := stored(id); s != "paused" || v != 2 {
		t.Errorf("after pause the jobs row is %s version %d", s, v)
	}

	// resume fires from now on (no catch-up); resuming an active job
	// changes nothing.
	before := dbNow()
	out, _ = do("resume", id, "-o", "json")
	decode(t, out, &got)
	next := got.GetNextFireTime()
	if got.GetStatus() != sundialv1.JobStatus_JOB_STATUS_ACTIVE || got.GetVersion() != 3 || !onFiveMinutes(next) ||
		!next.AsTime().After(before) || next.AsTime().After(before.Add(5*time.Minute)) {
		t.Errorf("resume -o json (database clock %s before it):\n%s", before, out)
	}
	out, _ = do("resume", id)
	if want := "job " + id + " resumed: status active, version 3, next fire " + instant(next) + "\n"; out != want {
		t.Errorf("resume printed %q, want %q", out, want)
	}
	if s, v := stored(id); s != "active" || v != 3 {
		t.Errorf("after resume the jobs row is %s version %d", s, v)
	}

	// history of a job that has not fired: a header, no rows; empty JSON.
	const header = "SCHEDULED EXECUTION ATTEMPT STATUS LATENESS DURATION HTTP WORKER DETAIL"
	out, stderr := do("history", id)
	if rows := cells(out); len(rows) != 1 || strings.Join(rows[0], " ") != header || stderr != "" {
		t.Errorf("history of a job without executions:\n%s%s", out, stderr)
	}
	out, _ = do("history", id, "-o", "json")
	var list sundialv1.ListExecutionsResponse
	decode(t, out, &list)
	if strings.TrimSpace(out) != "{}" || len(list.GetAttempts()) != 0 {
		t.Errorf("history -o json of a job without executions: %q", out)
	}

	// Three attempts of two executions, recorded in the api's ledger the
	// way a worker records them.
	jobUUID := uuid.MustParse(id)
	slot1 := dbNow().Add(-10 * time.Minute).Truncate(time.Minute)
	slot2 := slot1.Add(5 * time.Minute)
	exec1, exec2 := firing.ExecutionID(jobUUID, slot1).String(), firing.ExecutionID(jobUUID, slot2).String()
	attempt := func(exec string, slot time.Time, n int32, st sundialv1.ExecutionStatus, fire time.Time) *sundialv1.ExecutionAttempt {
		return &sundialv1.ExecutionAttempt{ExecutionId: exec, JobId: id, Tenant: "acme", Attempt: n, Status: st,
			ScheduledTime: timestamppb.New(slot), FireTime: timestamppb.New(fire), FenceToken: 7, Worker: "w1", JobVersion: 1}
	}
	failed := attempt(exec1, slot1, 1, sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED, slot1)
	failed.StartedTime, failed.FinishedTime = timestamppb.New(slot1.Add(3*time.Millisecond)), timestamppb.New(slot1.Add(83*time.Millisecond))
	failed.Lateness, failed.Duration = durationpb.New(3*time.Millisecond), durationpb.New(80*time.Millisecond)
	failed.HttpStatus, failed.Error, failed.ResponseExcerpt = 503, "status 503", "busy"
	failed.Reason = "http_5xx; attempt 2 of 3"
	retried := attempt(exec1, slot1, 2, sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, slot1.Add(time.Second))
	retried.StartedTime, retried.FinishedTime = timestamppb.New(slot1.Add(time.Second+2*time.Millisecond)), timestamppb.New(slot1.Add(time.Second+122*time.Millisecond))
	retried.Lateness, retried.Duration, retried.HttpStatus = durationpb.New(2*time.Millisecond), durationpb.New(120*time.Millisecond), 200
	skipped := attempt(exec2, slot2, 1, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, slot2)
	skipped.Reason = "stale job version 1 (current 2)"
	w := ledger.NewWriter(ledger.Wrap(testinfra.CassandraSession(t, testinfra.CassandraCluster(t))), keyspace)
	for _, a := range []*sundialv1.ExecutionAttempt{failed, retried, skipped} {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := w.Record(rctx, a)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}

	// history: newest slot first, an execution's attempts newest first.
	wantRows := [][]string{
		{instant(skipped.GetScheduledTime()), exec2, "1", "SKIPPED", "-", "-", "-", "w1", "stale job version 1 (current 2)"},
		{instant(retried.GetScheduledTime()), exec1, "2", "SUCCEEDED", "2ms", "120ms", "200", "w1", "-"},
		{instant(failed.GetScheduledTime()), exec1, "1", "RETRY_SCHEDULED", "3ms", "80ms", "503", "w1", "status 503"},
	}
	out, _ = do("history", id)
	rows := cells(out)
	if len(rows) != 4 || strings.Join(rows[0], " ") != header {
		t.Fatalf("history:\n%s", out)
	}
	for i, want := range wantRows {
		if !slices.Equal(rows[i+1], want) {
			t.Errorf("history row %d: %q, want %q", i+1, rows[i+1], want)
		}
	}
	out, _ = do("history", id, "-o", "json")
	decode(t, out, &list)
	if len(list.GetAttempts()) != 3 || list.GetNextPageToken() != "" {
		t.Fatalf("history -o json:\n%s", out)
	}
	for i, want := range []*sundialv1.ExecutionAttempt{skipped, retried, failed} {
		a := list.GetAttempts()[i]
		if a.GetExecutionId() != want.GetExecutionId() || a.GetAttempt() != want.GetAttempt() || a.GetStatus() != want.GetStatus() ||
			a.GetHttpStatus() != want.GetHttpStatus() || a.GetError() != want.GetError() || a.GetReason() != want.GetReason() ||
			a.GetResponseExcerpt() != want.GetResponseExcerpt() || a.GetFenceToken() != 7 || a.GetWorker() != "w1" ||
			!a.GetScheduledTime().AsTime().Equal(want.GetScheduledTime().AsTime()) || a.GetDuration().AsDuration() != want.GetDuration().AsDuration() {
			t.Errorf("history -o json attempt %d: %v, want %v", i, a, want)
		}
	}

	// Paging: two rows, then the rest from the printed token.
	out, stderr = do("history", id, "--page-size", "2")
	token, ok := strings.CutPrefix(strings.TrimSpace(stderr), "more: --page-token ")
	if rows := cells(out); len(rows) != 3 || !slices.Equal(rows[2], wantRows[1]) || !ok || token == "" {
		t.Fatalf("history --page-size 2:\n%s%s", out, stderr)
	}
	out, stderr = do("history", id, "--page-size", "2", "--page-token", token)
	if rows := cells(out); len(rows) != 2 || !slices.Equal(rows[1], wantRows[2]) || stderr != "" {
		t.Errorf("history's second page:\n%s%s", out, stderr)
	}

	// history --execution: one execution's attempts, oldest first.
	out, _ = do("history", "--execution", exec1)
	if rows := cells(out); len(rows) != 3 || !slices.Equal(rows[1], wantRows[2]) || !slices.Equal(rows[2], wantRows[1]) {
		t.Errorf("history --execution:\n%s", out)
	}
	out, _ = do("history", "--execution", exec1, "-o", "json")
	var one sundialv1.GetExecutionResponse
	decode(t, out, &one)
	if as := one.GetAttempts(); len(as) != 2 || as[0].GetAttempt() != 1 || as[0].GetHttpStatus() != 503 ||
		as[1].GetAttempt() != 2 || as[1].GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
		t.Errorf("history --execution -o json:\n%s", out)
	}

	// delete is soft: the job reads as deleted, deleting again changes
	// nothing, and its history stays.
	out, _ = do("delete", id)
	if want := "job " + id + " deleted: status deleted, version 4, next fire -\n"; out != want {
		t.Errorf("delete printed %q, want %q", out, want)
	}
	out, _ = do("delete", id, "-o", "json")
	decode(t, out, &got)
	if got.GetStatus() != sundialv1.JobStatus_JOB_STATUS_DELETED || got.GetVersion() != 4 || got.GetNextFireTime() != nil {
		t.Errorf("delete -o json of a deleted job:\n%s", out)
	}
	out, _ = do("get", id)
	if f := fields(t, out); f["Status"] != "deleted (version 4)" || f["Next fire"] != "-" {
		t.Errorf("get after delete:\n%s", out)
	}
	if s, v := stored(id); s != "deleted" || v != 4 {
		t.Errorf("after delete the jobs row is %s version %d", s, v)
	}
	out, _ = do("history", id)
	if rows := cells(out); len(rows) != 4 {
		t.Errorf("history after delete:\n%s", out)
	}

	// server-preview: the server's instants across London's spring-forward,
	// the same as the offline preview's.
	wantTimes := []string{"2026-03-28T09:00:00Z", "2026-03-29T08:00:00Z", "2026-03-30T08:00:00Z"}
	args := []string{"--cron", "0 9 * * *", "--timezone", "Europe/London", "--from", "2026-03-27T12:00:00Z", "-n", "3"}
	out, _ = do(append([]string{"server-preview"}, args...)...)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 || lines[0] == "" || lines[1] != "2026-03-28T09:00:00Z  Sat 2026-03-28 09:00:00 GMT" ||
		lines[2] != "2026-03-29T08:00:00Z  Sun 2026-03-29 09:00:00 BST" || lines[3] != "2026-03-30T08:00:00Z  Mon 2026-03-30 09:00:00 BST" {
		t.Errorf("server-preview:\n%s", out)
	}
	out, _ = do(append([]string{"server-preview", "-o", "json"}, args...)...)
	var preview sundialv1.PreviewScheduleResponse
	decode(t, out, &preview)
	var times []string
	for _, ts := range preview.GetTimes() {
		times = append(times, instant(ts))
	}
	if !slices.Equal(times, wantTimes) || preview.GetDescription() != lines[0] {
		t.Errorf("server-preview -o json:\n%s", out)
	}
	code, offline, stderr := cli(t, time.Now(), "preview", "--cron", "0 9 * * *", "--tz", "Europe/London", "--from", "2026-03-27T12:00:00Z", "--count", "3")
	if code != 0 || offline != strings.Join(wantTimes, "\n")+"\n" {
		t.Errorf("offline preview: exit %d\n%s%s", code, offline, stderr)
	}
}
