//go:build integration

package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/firingstats"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/services/api/internal/console"
	"github.com/sundialhq/sundial/testkit/harness"
)

// pageBudget is the server-side time every console page must answer in
// (the median of its runs after a warm-up).
const pageBudget = 200 * time.Millisecond

// planCostBound is the highest total cost (the planner's estimate, in its
// units of one sequential page read) any statement a page runs may have.
// A range of an index read in order, LIMITed, costs tens to a few
// thousand; reading every job of a 200,000-job tenant costs tens of
// thousands, so a plan that degrades into reading a table (or the whole of
// an index) crosses it.
const planCostBound = 10_000

// largeTable: a table with at least this many rows (pg_class.reltuples)
// is one a page must never read with a sequential scan.
const largeTable = 5_000

// TestIntegrationConsolePagePlans is the scaled-down tripwire of the
// console's page times: a tenant of 200,000 jobs (and 100,000 ledger
// records for a few of them, 20,000 dead letters, an audit row per job and
// eight days of the firing rollup), analysed, then every page is fetched
// once with a pgx tracer on the api's pool recording each statement it
// runs on Postgres (the store's, through the loopback gRPC api, and the
// console's own), and each statement is EXPLAINed with the arguments the
// page gave it: no sequential scan of a table of 5,000 rows or more, and
// a total cost within planCostBound. A dropped index or a query that
// stops using one fails here. Then each page is timed through the
// console's handler (httptest: server-side, no client or socket): the
// median of 5 runs after a warm-up must be within 200 ms. On the shared
// 2-core machine the time is the coarse check; the plans are the
// tripwire. The ledger-backed pages (job history, executions, an
// execution) read the real Cassandra, whose reads are by partition key by
// construction (pkg/store/ledger), so only their time is asserted.
func TestIntegrationConsolePagePlans(t *testing.T) {
	rec := &statements{}
	api, con := startTracedConsole(t, rec)
	fx := seedPages(t, api, pageScale{Jobs: 200_000, Ledger: 100_000, DeadLetters: 20_000}, 2)
	fx.handler = con
	large := largeTables(t, api.Pool)
	t.Logf("large tables (rows): %v", large)
	for _, table := range []string{"dead_letters", "job_audit", "firing_minutes"} {
		if large[table] == 0 {
			t.Fatalf("%s should be large after seeding: %v", table, large)
		}
	}

	for _, p := range fx.pages() {
		for _, problem := range fx.planProblems(t, rec, large, p, planCostBound) {
			t.Error(problem)
		}
	}

	for _, p := range fx.pages() {
		median, maxd := fx.time(t, p, 5)
		t.Logf("%-34s median %9s  max %9s  %s %s", p.name, median.Round(100*time.Microsecond), maxd.Round(100*time.Microsecond), p.method, p.path)
		if budget := fx.budget(p); median > budget {
			t.Errorf("%s: median %s over %s", p.name, median, budget)
		}
	}

	// The tripwire trips: without the index a page's read needs, the page
	// fails the check. (The dead-letter groups' own index, whose loss
	// leaves a bitmap read of the tenant's rows, is held by
	// TestIntegrationConsolePlansNamesAndGroups. job_audit_tenant_action_at
	// is not among these: without it the action filter's page reads
	// (tenant, at) and filters, a cost of about 10,100 here against the
	// bound's 10,000 and 31 with it — too close to the bound to trip
	// reliably at this size.)
	for _, c := range []struct{ index, page string }{
		{"jobs_tenant_status", "jobs, status completed (5 newest)"},
		{"dead_letters_tenant_dead", "dead letters"},
		{"jobs_tenant_name_prefix", "executions, job by name"},
		{"job_audit_tenant_at", "audit"},
	} {
		t.Run("without "+c.index, func(t *testing.T) {
			ctx := context.Background()
			var def string
			if err := api.Pool.QueryRow(ctx, `SELECT pg_get_indexdef(to_regclass($1))`, c.index).Scan(&def); err != nil || def == "" {
				t.Fatalf("index %s: %q %v", c.index, def, err)
			}
			if _, err := api.Pool.Exec(ctx, "DROP INDEX "+c.index); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if _, err := api.Pool.Exec(ctx, def); err != nil {
					t.Fatal(err)
				}
			}()
			i := slices.IndexFunc(fx.pages(), func(p consolePage) bool { return p.name == c.page })
			problems := fx.planProblems(t, rec, large, fx.pages()[i], planCostBound)
			if len(problems) == 0 {
				t.Errorf("%s passes the plan check without %s", c.page, c.index)
			}
			for _, p := range problems {
				t.Logf("as it should: %s", oneLine(p, 300))
			}
		})
	}
}

// planProblems fetches p once with rec on and EXPLAINs every statement it
// ran: a sequential scan of a large table, a sort of many rows read from
// one, or a total cost over costBound, is a problem.
func (fx *pageFixture) planProblems(t *testing.T, rec *statements, large map[string]float64, p consolePage, costBound float64) []string {
	t.Helper()
	pool := fx.api.Pool
	rec.start()
	code, body := fx.serve(t, p)
	got := rec.stop()
	if code != p.code() {
		t.Fatalf("%s: %d\n%s", p.name, code, body)
	}
	var problems []string
	var explained int
	for _, st := range got {
		if !explainable(st.sql) {
			continue
		}
		explained++
		plan, cost := explain(t, pool, st, false)
		if scans := seqScans(plan); hasLarge(scans, large) && !visibilityCurrent(t, pool, scans) {
			// A table other tests' open transactions keep vacuum from
			// marking all-visible makes an index-only scan look dear;
			// ask again with sequential scans priced out: an index
			// must still serve it.
			t.Logf("%s: visibility map not current; planned again without sequential scans", p.name)
			plan, cost = explain(t, pool, st, true)
		}
		for _, scan := range seqScans(plan) {
			if large[scan] > 0 {
				problems = append(problems, fmt.Sprintf("%s: a sequential scan of %s (%.0f rows):\n%s\n%s", p.name, scan, large[scan], st.sql, planText(plan)))
			}
		}
		for _, n := range tableSorts(plan) {
			problems = append(problems, fmt.Sprintf("%s: a sort of %.0f rows read from a table (an ordered index is missing):\n%s\n%s", p.name, n, st.sql, planText(plan)))
		}
		if cost > costBound {
			problems = append(problems, fmt.Sprintf("%s: a plan of total cost %.0f (bound %.0f):\n%s\n%s", p.name, cost, costBound, st.sql, planText(plan)))
		}
		t.Logf("%-34s cost %8.1f  %s", p.name, cost, oneLine(st.sql, 110))
	}
	if explained == 0 && p.postgres {
		problems = append(problems, p.name+": the tracer saw no statement; is the pool traced?")
	}
	return problems
}

// startTracedConsole is startConsoleHandler with the ledger on and rec
// tracing the api's Postgres pool.
func startTracedConsole(t *testing.T, rec pgx.QueryTracer) (*apitest.API, *console.Console) {
	var con *console.Console
	api := apitest.Start(t, apitest.Options{Ledger: true, Tracer: rec, Console: func(conn *grpc.ClientConn, tokens *auth.Tokens, pool *pgxpool.Pool) (http.Handler, error) {
		var err error
		con, err = console.New(console.Config{Conn: conn, Tokens: tokens, Pool: pool})
		return con, err
	}})
	return api, con
}

// statements is a pgx tracer that keeps the statements run while on.
type statements struct {
	mu  sync.Mutex
	on  bool
	got []statement
}

type statement struct {
	sql  string
	args []any
}

func (s *statements) add(sql string, args []any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on {
		s.got = append(s.got, statement{sql, slices.Clone(args)})
	}
}

func (s *statements) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on, s.got = true, nil
}

func (s *statements) stop() []statement {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on = false
	return s.got
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.add(d.SQL, d.Args)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *statements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.add(d.SQL, d.Args)
}

func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// explainable: a statement that reads or writes rows (not a transaction's
// BEGIN or COMMIT, a SET, or the test's own EXPLAIN).
func explainable(sql string) bool {
	f := strings.Fields(sql)
	if len(f) == 0 {
		return false
	}
	switch strings.ToUpper(f[0]) {
	case "SELECT", "WITH", "UPDATE", "DELETE", "INSERT":
		return true
	}
	return false
}

// explain plans st with its arguments, without running it (in a
// transaction rolled back), and returns the plan and its total cost.
func explain(t *testing.T, pool *pgxpool.Pool, st statement, noSeqScan bool) (map[string]any, float64) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if noSeqScan {
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			t.Fatal(err)
		}
	}
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+st.sql, st.args...).Scan(&raw); err != nil {
		t.Fatalf("explain %s: %v", st.sql, err)
	}
	var out []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		t.Fatalf("explain: %v %s", err, raw)
	}
	cost, _ := out[0].Plan["Total Cost"].(float64)
	return out[0].Plan, cost
}

// seqScans lists the relations a plan reads with a sequential scan.
func seqScans(node map[string]any) []string {
	var out []string
	if node["Node Type"] == "Seq Scan" {
		rel, _ := node["Relation Name"].(string)
		out = append(out, rel)
	}
	subs, _ := node["Plans"].([]any)
	for _, s := range subs {
		if m, ok := s.(map[string]any); ok {
			out = append(out, seqScans(m)...)
		}
	}
	return out
}

// tableSorts lists the sizes of the sorts of at least largeTable rows
// straight out of a scan: the order an index was meant to give. (A sort
// of groups, after an aggregate, is not one.)
func tableSorts(node map[string]any) []float64 {
	var out []float64
	subs, _ := node["Plans"].([]any)
	if node["Node Type"] == "Sort" && len(subs) == 1 {
		child, _ := subs[0].(map[string]any)
		rows, _ := child["Plan Rows"].(float64)
		if strings.HasSuffix(fmt.Sprint(child["Node Type"]), "Scan") && rows >= largeTable {
			out = append(out, rows)
		}
	}
	for _, s := range subs {
		if m, ok := s.(map[string]any); ok {
			out = append(out, tableSorts(m)...)
		}
	}
	return out
}

func hasLarge(tables []string, large map[string]float64) bool {
	return slices.ContainsFunc(tables, func(t string) bool { return large[t] > 0 })
}

// visibilityCurrent: every page of each table is marked all-visible.
func visibilityCurrent(t *testing.T, pool *pgxpool.Pool, tables []string) bool {
	t.Helper()
	var lagging bool
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(bool_or(relallvisible < relpages), false) FROM pg_class
		WHERE relnamespace = current_schema()::regnamespace AND relname = ANY($1)`, tables).Scan(&lagging); err != nil {
		t.Fatal(err)
	}
	return !lagging
}

func planText(plan map[string]any) string {
	raw, _ := json.MarshalIndent(plan, "\t", "  ")
	return "\t" + string(raw)
}

func oneLine(sql string, n int) string {
	s := strings.Join(strings.Fields(sql), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// largeTables maps each table of the test's schema with at least
// largeTable rows (as ANALYZE estimated them) to its row count.
func largeTables(t *testing.T, pool *pgxpool.Pool) map[string]float64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT c.relname, c.reltuples FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.reltuples >= $1`, largeTable)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for rows.Next() {
		var name string
		var n float32
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		out[name] = float64(n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if out["jobs"] == 0 {
		t.Fatalf("jobs should be large after seeding (is it analysed?): %v", out)
	}
	return out
}

// pageScale is how much a page test loads into tenant acme.
type pageScale struct {
	// Jobs are copied in (harness.CopyJobs): daily crons at minutes over
	// the day, 1 in 1,000 labelled team=billing, 1 in 100 then paused.
	Jobs int
	// Ledger records (attempts, 1 in 10 failed) go to history jobs
	// created through the api, 50,000 each (at least 4 jobs), one per
	// 20 s slot back from now, written with ledger.Writer.RecordMany.
	Ledger int
	// DeadLetters are acme's, spread over the history jobs, four error
	// classes and the past week; three other tenants have as many each.
	DeadLetters int
}

// pageFixture is a seeded api and what its pages are fetched with.
type pageFixture struct {
	api     *apitest.API
	b       *browser
	handler http.Handler // the console itself, timed without a socket
	token   string       // the session's CSRF token
	job     *sundialv1.Job
	exec    string // an execution of job in the ledger
	dead    string // a dead letter's execution id
	active  int    // acme's active jobs
}

// seedPages signs acme in and loads sc into its tenant with streams COPY
// connections; it returns when every table is analysed.
func seedPages(t *testing.T, api *apitest.API, sc pageScale, streams int) *pageFixture {
	t.Helper()
	ctx := context.Background()
	fx := &pageFixture{api: api, b: newBrowser(t, api)}

	// The history jobs, through the api (so they have audit rows, a
	// signing key and the api's encoding).
	perJob := 50_000
	nHist := max(4, (sc.Ledger+perJob-1)/perJob)
	client := sundialv1.NewJobServiceClient(dial(t, api, apitest.TokenAcme))
	var hist []*sundialv1.Job
	for i := range nHist {
		got, err := client.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{Name: fmt.Sprintf("history-%03d", i),
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "*/20 * * * * *"}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:9/hook"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		hist = append(hist, got.GetJob())
	}
	fx.job = hist[0]

	start := time.Now()
	loaded, err := harness.CopyJobs(ctx, api.Pool, "acme", sc.Jobs, harness.CopyOptions{Streams: streams, Progress: func(done int) {
		if done%1_000_000 == 0 {
			t.Logf("%d jobs loaded after %s", done, time.Since(start).Round(time.Second))
		}
	}}, benchJob)
	if err != nil {
		t.Fatalf("copy after %d jobs: %v", loaded, err)
	}
	t.Logf("copied %d jobs in %s", loaded, time.Since(start).Round(time.Second))
	// Another tenant beside it, a tenth its size: acme's rows are not the
	// whole table, so a plan that reads the table instead of acme's range
	// of an index is the worse plan, not the only one.
	if _, err := harness.CopyJobs(ctx, api.Pool, "globex", max(1, sc.Jobs/10), harness.CopyOptions{Streams: streams}, benchJob); err != nil {
		t.Fatal(err)
	}
	s := time.Now()
	for _, q := range []string{
		`UPDATE jobs SET status = 'paused', next_fire_at = NULL WHERE tenant = 'acme' AND name LIKE 'job-%00'`,
		// The newest 5 jobs completed, the 5 before them critical: rare
		// values at the end of the id order.
		`UPDATE jobs SET status = 'completed', next_fire_at = NULL
			WHERE id IN (SELECT id FROM jobs WHERE tenant = 'acme' AND name LIKE 'job-%' ORDER BY id DESC LIMIT 5)`,
		`UPDATE jobs SET priority = 1
			WHERE id IN (SELECT id FROM jobs WHERE tenant = 'acme' AND name LIKE 'job-%' ORDER BY id DESC LIMIT 5 OFFSET 5)`,
		// An audit row per job, as creating each through the api leaves.
		`INSERT INTO job_audit (job_id, tenant, actor, action, version, at)
			SELECT id, tenant, 'acme/loader', 'create', 1, created_at FROM jobs WHERE name LIKE 'job-%'`,
	} {
		if _, err := api.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Logf("paused 1 in 100, an audit row per job, in %s", time.Since(s).Round(time.Second))

	s = time.Now()
	fx.exec = seedLedger(t, api, hist, sc.Ledger, perJob)
	t.Logf("wrote %d ledger records for %d jobs in %s", sc.Ledger, len(hist), time.Since(s).Round(time.Second))

	s = time.Now()
	fx.dead = api.DeadLetter(t, fx.job, time.Now().Add(-time.Minute).Truncate(20*time.Second), "http_5xx")
	ids := make([]string, len(hist))
	for i, j := range hist {
		ids[i] = j.GetId()
	}
	// acme's, then three times as many of three other tenants, arriving
	// interleaved as workers write them, to a few dozen target hosts.
	if _, err := api.Pool.Exec(ctx, `
		INSERT INTO dead_letters (execution_id, tenant, job_id, error_class, last_error, http_status, attempts, last_attempt, envelope, dead_at, target_host)
		SELECT gen_random_uuid(), CASE WHEN i % 4 = 0 THEN tenant ELSE 'tenant-' || i % 4 END, ($3::uuid[])[1 + i % cardinality($3::uuid[])],
		       (ARRAY['http_5xx', 'timeout', 'connect', 'http_4xx'])[1 + (i / 7) % 4], last_error, http_status, attempts, last_attempt, envelope,
		       dead_at - (i * (604800.0 / $2)) * interval '1 second', 'host-' || i % 41 || '.example'
		  FROM dead_letters, generate_series(1, $2) i WHERE execution_id = $1`, fx.dead, 4*sc.DeadLetters-4, ids); err != nil {
		t.Fatal(err)
	}
	// Eight days of the per-minute firing rollup (its retention), for
	// acme and nine other tenants, three priorities each.
	if _, err := api.Pool.Exec(ctx, `
		INSERT INTO firing_minutes (tenant, minute, priority, succeeded, failed, dead, lateness)
		SELECT CASE WHEN tn = 0 THEN 'acme' ELSE 'tenant-' || tn END, date_trunc('minute', now()) - m * interval '1 minute', p,
		       100, 3, 1, array_fill(10::bigint, ARRAY[$1::int])
		  FROM generate_series(0, 9) tn, generate_series(0, 8 * 1440 - 1) m, generate_series(1, 3) p`, firingstats.Buckets); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d dead letters and the firing rollup in %s", sc.DeadLetters, time.Since(s).Round(time.Second))

	s = time.Now()
	for _, table := range []string{"jobs", "job_audit", "dead_letters", "firing_minutes"} {
		if _, err := api.Pool.Exec(ctx, "VACUUM (ANALYZE) "+table); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("vacuumed and analysed in %s", time.Since(s).Round(time.Second))
	if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE tenant = 'acme' AND status = 'active'`).Scan(&fx.active); err != nil {
		t.Fatal(err)
	}
	// Signed in once the load is in: the bench-sized load takes longer
	// than a session's idle timeout (30 minutes).
	fx.b.signIn(apitest.TokenAcme)
	_, page, _ := fx.b.do("GET", "/jobs/new", nil)
	fx.token = csrf(t, page)
	return fx
}

// benchJob is the copied jobs' i-th.
func benchJob(i int) *sundialv1.Job {
	team := "other"
	if i%1000 == 7 {
		team = "billing"
	}
	return &sundialv1.Job{
		Name: "job-" + strconv.Itoa(i), Labels: map[string]string{"team": team},
		// What the api stores for a job created without one.
		Priority: sundialv1.Priority_PRIORITY_MEDIUM,
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: fmt.Sprintf("%d %d * * *", i%60, (i/60)%24)}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://hooks.example/job"}}},
	}
}

// seedLedger writes n attempts over jobs, perJob each at most, one per
// 20 s slot back from now, every 10th failed, and returns the execution
// id of the newest attempt of jobs[0].
func seedLedger(t *testing.T, api *apitest.API, jobs []*sundialv1.Job, n, perJob int) string {
	t.Helper()
	now := time.Now().UTC().Truncate(20 * time.Second)
	attempt := func(k int) *sundialv1.ExecutionAttempt {
		j := jobs[k%len(jobs)]
		slot := now.Add(-time.Duration(k/len(jobs)+1) * 20 * time.Second)
		a := &sundialv1.ExecutionAttempt{
			ExecutionId: firing.ExecutionID(uuid.MustParse(j.GetId()), slot).String(), JobId: j.GetId(), Tenant: "acme", Attempt: 1,
			ScheduledTime: timestamppb.New(slot), FireTime: timestamppb.New(slot),
			StartedTime: timestamppb.New(slot.Add(40 * time.Millisecond)), FinishedTime: timestamppb.New(slot.Add(140 * time.Millisecond)),
			Lateness: durationpb.New(40 * time.Millisecond), Duration: durationpb.New(100 * time.Millisecond),
			Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, HttpStatus: 200, Worker: "worker-1",
		}
		if k%10 == 3 {
			a.Status, a.HttpStatus, a.Error = sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED, 503, "HTTP 503 from target"
		}
		return a
	}
	if n > perJob*len(jobs) {
		t.Fatalf("%d records need more than %d jobs", n, len(jobs))
	}
	const chunk, workers = 2000, 4
	ctx := context.Background()
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := range next {
				recs := make([]ledger.Rec, 0, chunk)
				for k := from; k < min(from+chunk, n); k++ {
					recs = append(recs, ledger.Rec{Attempt: attempt(k), Held: true})
				}
				for try := 0; ; try++ {
					failed := ledger.Rec{}
					var retry []ledger.Rec
					for i, err := range api.Writer.RecordMany(ctx, recs) {
						if err != nil {
							failed = recs[i]
							retry = append(retry, recs[i])
						}
					}
					if len(retry) == 0 {
						break
					}
					if try == 5 {
						errs <- fmt.Errorf("ledger: %d records not written, e.g. %s", len(retry), failed.Attempt.GetExecutionId())
						return
					}
					recs = retry
				}
			}
		}()
	}
	for from := 0; from < n; from += chunk {
		next <- from
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return attempt(0).GetExecutionId()
}

// consolePage is one console page as a browser asks for it.
type consolePage struct {
	name, method, path string
	form               url.Values
	// postgres: the page reads Postgres.
	postgres bool
}

// budget is the median time p must answer in: every page, the forecast
// included (it reads per-schedule counts, not every job).
func (fx *pageFixture) budget(consolePage) time.Duration { return pageBudget }

func (p consolePage) code() int { return http.StatusOK }

// pages are every console page, with the filters that pick different
// reads, against the fixture's jobs, executions and dead letters.
func (fx *pageFixture) pages() []consolePage {
	id := fx.job.GetId()
	hour := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	get := func(name, path string) consolePage {
		return consolePage{name: name, method: "GET", path: path, postgres: true}
	}
	day := time.Now().UTC().Add(-24 * time.Hour).Truncate(time.Minute)
	return []consolePage{
		get("overview", "/"),
		get("jobs, first page", "/jobs"),
		get("jobs, status paused (1%)", "/jobs?status=paused"),
		get("jobs, status completed (5 newest)", "/jobs?status=completed"),
		get("jobs, label 0.1%", "/jobs?labels=team%3Dbilling"),
		get("jobs, next fire in an hour", "/jobs?"+url.Values{"from": {hour.Format("2006-01-02T15:04")}, "before": {hour.Add(time.Hour).Format("2006-01-02T15:04")}}.Encode()),
		get("jobs, name contains (common)", "/jobs?name=job-1"),
		get("jobs, name contains zz (none)", "/jobs?name=zz"),
		get("jobs, priority critical (5)", "/jobs?priority=critical"),
		get("jobs, priority medium (common)", "/jobs?priority=medium"),
		get("job page (history)", "/jobs/"+id),
		get("edit", "/jobs/"+id+"/edit"),
		get("backfill form", "/jobs/"+id+"/backfill"),
		{name: "backfill dry run (24 h of 20 s)", method: "POST", path: "/jobs/" + id + "/backfill", postgres: true, form: url.Values{
			"csrf": {fx.token}, "from": {day.Format("2006-01-02T15:04:05")}, "to": {day.Add(24 * time.Hour).Format("2006-01-02T15:04:05")}}},
		get("new job form", "/jobs/new"),
		get("executions (tenant, 24 h)", "/executions"),
		get("executions, failed", "/executions?status=failed"),
		get("executions, job by id", "/executions?job="+id),
		get("executions, job by name", "/executions?job="+url.QueryEscape(fx.job.GetName())),
		get("execution detail", "/executions/"+fx.exec),
		get("dead letters", "/dead-letters"),
		get("dead letters, class timeout", "/dead-letters?class=timeout"),
		get("dead letters, job by name", "/dead-letters?job="+url.QueryEscape(fx.job.GetName())),
		get("dead-letter detail", "/dead-letters/"+fx.dead),
		get("audit", "/audit"),
		get("audit, action redrive (none)", "/audit?action=redrive"),
		{name: "forecast (24 h)", method: "GET", path: "/forecast", postgres: true},
		get("sessions", "/sessions"),
	}
}

// serve runs p through the console's handler with the signed-in
// session's cookies and returns the status and body.
func (fx *pageFixture) serve(t *testing.T, p consolePage) (int, string) {
	t.Helper()
	base := "http://" + fx.api.HTTPAddr
	var req *http.Request
	if p.form != nil {
		req = httptest.NewRequest(p.method, base+p.path, strings.NewReader(p.form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", base)
	} else {
		req = httptest.NewRequest(p.method, base+p.path, nil)
	}
	u, _ := url.Parse(base)
	for _, c := range fx.b.c.Jar.Cookies(u) {
		req.AddCookie(c)
	}
	w := httptest.NewRecorder()
	fx.handler.ServeHTTP(w, req)
	return w.Code, w.Body.String()
}

// time serves p once to warm up, then runs times, and returns the median
// and the maximum.
func (fx *pageFixture) time(t *testing.T, p consolePage, runs int) (median, maxd time.Duration) {
	t.Helper()
	if code, body := fx.serve(t, p); code != p.code() {
		t.Fatalf("%s: %d\n%s", p.name, code, body)
	}
	ds := make([]time.Duration, 0, runs)
	for range runs {
		s := time.Now()
		code, body := fx.serve(t, p)
		ds = append(ds, time.Since(s))
		if code != p.code() {
			t.Fatalf("%s: %d\n%s", p.name, code, body)
		}
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)-1]
}
