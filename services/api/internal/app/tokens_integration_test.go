//go:build integration

package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/deniedaudit"
	"github.com/sundialhq/sundial/services/api/internal/tokens"
	"github.com/sundialhq/sundial/testkit/logbuf"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// tokensAPI is the whole api, composed from flags as main does, whose
// only tokens are a --tokens-file's.
type tokensAPI struct {
	t        *testing.T
	file     string
	logs     *logbuf.Buffer
	pool     *pgxpool.Pool
	jobs     sundialv1.JobServiceClient
	tokens   sundialv1.TokenServiceClient
	httpAddr string
}

// hashLine is the tokens-file line of token, as `schedctl token hash
// --principal` prints it.
func hashLine(t *testing.T, token, principal string) string {
	t.Helper()
	h, err := auth.HashToken(token, auth.BootstrapHashParams)
	require.NoError(t, err)
	return "'" + h + "': '" + principal + "'\n"
}

func (a *tokensAPI) write(body string) {
	a.t.Helper()
	// Written aside and renamed, as an editor or a Secret update does.
	tmp := a.file + ".tmp"
	require.NoError(a.t, os.WriteFile(tmp, []byte(body), 0o600))
	require.NoError(a.t, os.Rename(tmp, a.file))
}

// loadConfig loads the api's flags with args and validates them.
func loadConfig(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	var cfg Config
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.Register(fs)
	require.NoError(t, config.Load(fs, args, func(string) (string, bool) { return "", false }))
	var p config.Problems
	cfg.Validate(&p)
	return cfg, p.Err()
}

func startTokensAPI(t *testing.T, body string) *tokensAPI {
	t.Helper()
	a := &tokensAPI{t: t, file: filepath.Join(t.TempDir(), "tokens.yaml"), logs: &logbuf.Buffer{}}
	a.write(body)
	dsn := testinfra.PostgresDSN(t)
	grpcAddr := testinfra.UnusedAddr(t)
	a.httpAddr = testinfra.UnusedAddr(t)
	_, prefix := testinfra.Redis(t)
	cfg, err := loadConfig(t, "--tokens-file", a.file, "--grpc-addr", grpcAddr, "--http-addr", a.httpAddr,
		"--postgres-dsn", dsn, "--redis-addr", testinfra.RedisAddr(t), "--redis-key-prefix", prefix,
		"--cassandra-hosts", strings.Join(testinfra.CassandraHosts(t), ","), "--cassandra-keyspace", testinfra.CassandraKeyspace(t))
	require.NoError(t, err)
	app, err := New(context.Background(), cfg, Deps{Logger: slog.New(slog.NewTextHandler(a.logs, nil)), Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	g := &lifecycle.Group{}
	g.Add(app.Services...)
	require.NoError(t, g.Start(context.Background()))
	t.Cleanup(g.Stop)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return app.Checks["postgres"](ctx) == nil
	}, 30*time.Second, 100*time.Millisecond)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	a.jobs = sundialv1.NewJobServiceClient(conn)
	a.tokens = sundialv1.NewTokenServiceClient(conn)
	a.pool = testinfra.PostgresPool(t, dsn)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("api log:\n%s\naccess_denied_audit:\n%s", a.logs.String(), a.dumpAudit())
		}
	})
	return a
}

// grpcCode is the code of a ListJobs call with token.
func (a *tokensAPI) grpcCode(token string) codes.Code {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := a.jobs.ListJobs(ctx, &sundialv1.ListJobsRequest{}, grpc.PerRPCCredentials(auth.Bearer(token)))
	return status.Code(err)
}

// httpStatus is the status of GET /v1/jobs with token.
func (a *tokensAPI) httpStatus(token string) int {
	req, err := http.NewRequest("GET", "http://"+a.httpAddr+"/v1/jobs", nil)
	require.NoError(a.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func (a *tokensAPI) auditCount(where string, args ...any) int {
	var n int
	require.NoError(a.t, a.pool.QueryRow(context.Background(), `SELECT count(*) FROM access_denied_audit WHERE `+where, args...).Scan(&n))
	return n
}

func (a *tokensAPI) dumpAudit() string {
	rows, err := a.pool.Query(context.Background(), `SELECT code, method, source, tenant, actor, token_id, fingerprint, suppressed FROM access_denied_audit ORDER BY id`)
	require.NoError(a.t, err)
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(a.t, err)
		fmt.Fprintln(&b, vals...)
	}
	return b.String()
}

// A plain token in the tokens file stops the api at start, naming the
// file, the line and the fix, and never quoting the token.
func TestTokensFileRefusesPlainTokens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(file, []byte(hashLine(t, "sdb_ok", "acme")+"plain-secret-token: acme\n"), 0o600))
	_, err := loadConfig(t, "--tokens-file", file)
	require.Error(t, err)
	require.Contains(t, err.Error(), "tokens file "+file+" line 2: the key is a plain token")
	require.Contains(t, err.Error(), "schedctl token hash")
	require.NotContains(t, err.Error(), "plain-secret-token")

	require.NoError(t, os.WriteFile(file, []byte(hashLine(t, "sdb_ok", "acme:ops:boss")), 0o600))
	_, err = loadConfig(t, "--tokens-file", file)
	require.ErrorContains(t, err, "line 1: auth: principal")
}

// A hashed token works over gRPC and HTTP; editing the file adds and
// removes tokens without a restart within the revocation bound; a
// malformed edit is refused in the log, naming its line, and the old set
// stays.
func TestTokensFileHashedAndReloaded(t *testing.T) {
	a := startTokensAPI(t, "# bootstrap tokens\n"+hashLine(t, "sdb_first", "acme:ops"))
	require.Equal(t, codes.OK, a.grpcCode("sdb_first"))
	require.Equal(t, http.StatusOK, a.httpStatus("sdb_first"))
	require.Equal(t, codes.Unauthenticated, a.grpcCode("sdb_second"))
	require.Equal(t, http.StatusUnauthorized, a.httpStatus("sdb_second"))

	// within is how long a change may take: the bound, and a margin for
	// the machine.
	within := tokens.RevocationBound + 2*time.Second
	t0 := time.Now()
	a.write(hashLine(t, "sdb_first", "acme:ops") + hashLine(t, "sdb_second", "globex"))
	require.Eventually(t, func() bool { return a.grpcCode("sdb_second") == codes.OK }, within, 50*time.Millisecond, "added token:\n%s", a.logs.String())
	t.Logf("added token works after %v", time.Since(t0))
	require.Equal(t, http.StatusOK, a.httpStatus("sdb_second"))
	require.Contains(t, a.logs.String(), `msg="tokens file reloaded"`)

	t0 = time.Now()
	a.write(hashLine(t, "sdb_second", "globex"))
	require.Eventually(t, func() bool { return a.grpcCode("sdb_first") == codes.Unauthenticated }, within, 50*time.Millisecond)
	t.Logf("removed token refused after %v", time.Since(t0))
	require.Equal(t, http.StatusUnauthorized, a.httpStatus("sdb_first"))

	a.write(hashLine(t, "sdb_second", "globex") + "sdb_plain_new: globex\n")
	require.Eventually(t, func() bool { return strings.Contains(a.logs.String(), "tokens file changed but is refused") }, within, 50*time.Millisecond)
	require.Contains(t, a.logs.String(), "line 2: the key is a plain token")
	require.NotContains(t, a.logs.String(), "sdb_plain_new")
	require.Equal(t, codes.OK, a.grpcCode("sdb_second"), "the old set stays")
	require.Equal(t, codes.Unauthenticated, a.grpcCode("sdb_plain_new"))
}

// Refused calls, over gRPC and HTTP, for a bad token and for a role, are
// written to access_denied_audit; a flood of 1,000 from one caller writes
// a bounded number of rows.
func TestRefusedCallsAudited(t *testing.T) {
	a := startTokensAPI(t, hashLine(t, "sdb_admin", "acme:ops")+hashLine(t, "sdb_viewer", "acme:viewer:read-only")+
		hashLine(t, "sdb_oncall", "platform:oncall:operator"))

	require.Equal(t, codes.Unauthenticated, a.grpcCode("sdb_nobody"))
	require.Equal(t, http.StatusUnauthorized, a.httpStatus("sdb_nobody_http"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := a.jobs.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{}}, grpc.PerRPCCredentials(auth.Bearer("sdb_viewer")))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

	require.Eventually(t, func() bool {
		return a.auditCount(`code = 'Unauthenticated' AND method = '/sundial.v1.JobService/ListJobs' AND source = '127.0.0.1' AND fingerprint = $1`, auth.Fingerprint("sdb_nobody")) == 1 &&
			a.auditCount(`code = 'Unauthenticated' AND source = '127.0.0.1' AND fingerprint = $1`, auth.Fingerprint("sdb_nobody_http")) == 1 &&
			a.auditCount(`code = 'PermissionDenied' AND method = '/sundial.v1.JobService/CreateJob' AND tenant = 'acme' AND actor = 'acme/viewer'`) == 1
	}, 10*time.Second, 100*time.Millisecond)

	// 1,000 calls with a viewer's token to a method its role may not
	// call: the caller is its principal.
	for range 1000 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := a.jobs.DeleteJob(ctx, &sundialv1.DeleteJobRequest{Id: "x"}, grpc.PerRPCCredentials(auth.Bearer("sdb_viewer")))
		cancel()
		require.Equal(t, codes.PermissionDenied, status.Code(err))
	}
	// The viewer had one row already (CreateJob): PerCaller in all.
	flood := `actor = 'acme/viewer'`
	require.Eventually(t, func() bool { return a.auditCount(flood) == deniedaudit.DefaultPerCaller }, 10*time.Second, 100*time.Millisecond,
		"rows: %d", a.auditCount(flood))
	time.Sleep(2 * deniedaudit.DefaultFlushInterval) // two more writes of the queue, which must add nothing
	require.Equal(t, deniedaudit.DefaultPerCaller, a.auditCount(flood))
	require.Equal(t, codes.OK, a.grpcCode("sdb_admin"), "the api serves on")

	// ListAccessDenied: an operator reads every row, an admin its
	// tenant's, a read-only token none.
	list := func(token string) ([]*sundialv1.AccessDeniedEntry, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := a.tokens.ListAccessDenied(ctx, &sundialv1.ListAccessDeniedRequest{PageSize: 1000}, grpc.PerRPCCredentials(auth.Bearer(token)))
		return resp.GetEntries(), err
	}
	all, err := list("sdb_oncall")
	require.NoError(t, err)
	require.Len(t, all, 2+deniedaudit.DefaultPerCaller)
	require.Equal(t, "acme/viewer", all[0].GetActor(), "newest first")
	require.Equal(t, "Unauthenticated", all[len(all)-1].GetCode())
	require.Equal(t, auth.Fingerprint("sdb_nobody"), all[len(all)-1].GetFingerprint())
	mine, err := list("sdb_admin")
	require.NoError(t, err)
	require.Len(t, mine, deniedaudit.DefaultPerCaller)
	for _, e := range mine {
		require.Equal(t, "acme", e.GetTenant())
	}
	_, err = list("sdb_viewer")
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	req, err := http.NewRequest("GET", "http://"+a.httpAddr+"/v1/access-denied?pageSize=1", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sdb_oncall")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"next_page_token"`)
	require.Contains(t, string(body), `"actor":"acme/viewer"`)
}
