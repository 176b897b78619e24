//go:build integration

package main_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/pgtest"
	"github.com/sundialhq/sundial/testkit/testinfra"

	"github.com/sundialhq/sundial/services/worker/internal/app"
	"github.com/sundialhq/sundial/services/worker/internal/prepare"
	"github.com/sundialhq/sundial/services/worker/internal/recorder"
	"github.com/sundialhq/sundial/services/worker/internal/settle"
	"github.com/sundialhq/sundial/testkit/logbuf"
)

var workerBinary, relayBinary string

// Most tests run side by side (t.Parallel): each has its own env, so they
// share only the components, and most of their time is waiting on real
// time. A test stays serial (go test runs those first, one at a time)
// when others' load would stretch a bound it asserts past what a busy
// 2-core machine allows — fairness positions, a host limit's spread, a
// quiet tenant's p99, the catch-up rate, the clock offset estimate, a
// version published in time, a ledger read in time — or when its own
// load would stretch theirs (100,000 firings held). The restart tests
// stop shared components: serial, and make test-restarts runs them alone.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sundial-worker-test")
	if err != nil {
		panic(err)
	}
	workerBinary = filepath.Join(dir, "sundial-worker")
	relayBinary = filepath.Join(dir, "sundial-relay")
	// The relay is the real one: retries go worker → outbox → relay →
	// Kafka → worker, as in production.
	for bin, src := range map[string]string{workerBinary: ".", relayBinary: "../relay"} {
		build := exec.Command("go", "build", "-o", bin, ".")
		build.Dir = src
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", bin, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(
			// Owned by closed clients and on their way out: gocql's event
			// debouncer and the schema-agreement wait it starts when another
			// test's keyspace changes (it runs out its own timeout), idle
			// HTTP connections of the default transport.
			goleak.IgnoreAnyFunction("github.com/gocql/gocql.(*eventDebouncer).flusher"),
			goleak.IgnoreAnyFunction("github.com/gocql/gocql.(*Session).handleSchemaEvent"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// env is one test's isolated slice of the real components: its own topic
// prefix (the four priority topics and the DLQ), consumer group, Redis key
// prefix, ledger keyspace and Postgres schema (migrated: outbox,
// dead_letters, jobs, job_audit), plus an HTTP sink playing the target.
type env struct {
	t        *testing.T
	topics   firing.Topics
	group    string
	redisPfx string
	rdb      *redis.Client
	keyspace string
	ledger   ledger.Session
	dsn      string
	pg       *pgxpool.Pool
	// kekFile seals the tenants' signing keys, which keys reads and sign
	// every request the workers send (pkg/postgres/signingkey).
	kekFile string
	keys    *signingkey.Store
	sink    *sink
	kafka   *kgo.Client
	adm     *kadm.Client
	// logs has everything the env's in-process workers logged, for tests
	// that check what a worker must never log.
	logs *logbuf.Buffer
}

func newEnv(t *testing.T, partitions int32) *env {
	t.Helper()
	e := &env{t: t, logs: &logbuf.Buffer{}}
	e.topics = firing.Topics{Prefix: "test." + testinfra.UniqueName(t, 150)}
	e.group = testinfra.KafkaGroup(t)
	e.rdb, e.redisPfx = testinfra.Redis(t)
	e.dsn = pgtest.Schema(t)
	e.pg = pgtest.Pool(t, e.dsn)
	e.kafka = testinfra.KafkaClient(t, kgo.ProducerLinger(0))
	e.adm = kadm.NewClient(e.kafka)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all := append(e.topics.FireAll(), e.topics.DLQ())
	if _, err := e.adm.CreateTopics(ctx, partitions, 1, nil, all...); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := e.adm.DeleteTopics(ctx, all...); err != nil {
			t.Logf("topics %s.* left behind: %v", e.topics.Prefix, err)
		}
	})
	e.waitTopics(ctx, all, partitions)

	e.keyspace = testinfra.CassandraKeyspace(t)
	// 30 s a request, as the other packages' test sessions: the keyspace's
	// schema changes queue behind other tests' in Cassandra.
	s, err := ledger.Connect(ledger.ConnectConfig{Hosts: testinfra.CassandraHosts(t), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := ledger.Migrate(ctx, s, e.keyspace, ledger.DefaultReplication); err != nil {
		t.Fatal(err)
	}
	e.ledger = s
	e.kekFile = filepath.Join(t.TempDir(), "signing-kek")
	if err := os.WriteFile(e.kekFile, []byte(uuid.NewString()+uuid.NewString()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kek, err := signingkey.LoadKEK(e.kekFile)
	if err != nil {
		t.Fatal(err)
	}
	e.keys = signingkey.NewStore(e.pg, kek)
	e.sink = newSink(t, harness.NewKeys(e.keys))
	return e
}

func (e *env) waitTopics(ctx context.Context, topics []string, partitions int32) {
	e.t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		details, err := e.adm.ListTopics(ctx, topics...)
		ready := err == nil && len(details) == len(topics)
		for _, d := range details {
			if d.Err != nil || len(d.Partitions) != int(partitions) {
				ready = false
				continue
			}
			for _, p := range d.Partitions {
				if p.Leader < 0 {
					ready = false
				}
			}
		}
		if ready {
			return
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("topics not ready: %v", err)
		case <-tick.C:
		}
	}
}

// config is a worker configuration for this env.
func (e *env) config(workerID string) app.Config {
	return app.Config{
		KafkaBrokers:        strings.Join(testinfra.KafkaBrokers(e.t), ","),
		TopicPrefix:         e.topics.Prefix,
		Group:               e.group,
		RedisAddr:           testinfra.RedisAddr(e.t),
		RedisKeyPrefix:      e.redisPfx,
		CassandraHosts:      strings.Join(testinfra.CassandraHosts(e.t), ","),
		CassandraKeyspace:   e.keyspace,
		PostgresDSN:         e.dsn,
		PostgresMaxConns:    16,
		ClockSampleInterval: 5 * time.Second,
		SigningKEKFile:      e.kekFile,
		WorkerID:            workerID,
		MetricsMaxTenants:   100,
		Executors:           64,
		// The flags' defaults: the tests run the admission rule the
		// worker runs.
		HighExecutorsPercent:   90,
		MediumExecutorsPercent: 80,
		LowExecutorsPercent:    50,
		LeaseTTL:               3 * time.Second,
		PrepareLead:            prepare.DefaultConfig.Lead,
		PrepareBatch:           prepare.DefaultConfig.Batch,
		SettleBatch:            settle.DefaultStageConfig.Batch,
		DoneTTL:                time.Hour,
		LedgerRunningDelay:     recorder.DefaultConfig.RunningDelay,
		SessionTimeout:         sessionTimeout(e.t),
		LivenessTTL:            1500 * time.Millisecond,
		RevokeDrainTimeout:     10 * time.Second,
		CommitInterval:         200 * time.Millisecond,
		MaxHeld:                1_000_000,
		MediumHeldPercent:      80,
		LowHeldPercent:         50,
		AllowKafkaTargets:      "test.",
		// The sink listens on loopback, which the outbound policy refuses
		// unless allowlisted.
		AllowTargetAddrs: "127.0.0.1",
		MaxDeliveries:    5,
		BreakerFailures:  20,
		BreakerCooldown:  30 * time.Second,
		HostBurst:        100,
	}
}

// sessionTimeout is the workers' Kafka session timeout: 6 s, or
// SUNDIAL_TEST_SESSION_TIMEOUT where the broker allows shorter sessions
// (group.min.session.timeout.ms; deploy/local/kafka allows 1 s).
func sessionTimeout(t *testing.T) time.Duration {
	if v := os.Getenv("SUNDIAL_TEST_SESSION_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SUNDIAL_TEST_SESSION_TIMEOUT: %v", err)
		}
		return d
	}
	return 6 * time.Second
}

// startInProcess runs a worker inside the test process.
func (e *env) startInProcess(cfg app.Config) *app.Worker {
	e.t.Helper()
	return e.startInProcessWith(cfg, app.Deps{})
}

func (e *env) startInProcessWith(cfg app.Config, deps app.Deps) *app.Worker {
	e.t.Helper()
	logger := slog.New(slog.NewTextHandler(testWriter{e.t, cfg.WorkerID, e.logs}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := app.New(ctx, cfg, deps, logger, prometheus.NewRegistry())
	if err != nil {
		e.t.Fatal(err)
	}
	var g lifecycle.Group
	g.Add(w.Services...)
	if err := g.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(g.Stop)
	return w
}

type testWriter struct {
	t    *testing.T
	name string
	copy *logbuf.Buffer
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(w.name + ": " + strings.TrimRight(string(p), "\n"))
	_, _ = w.copy.Write(p)
	return len(p), nil
}

// proc is a worker running as its own process.
type proc struct {
	cmd   *exec.Cmd
	admin string
	log   string
	done  chan struct{}
}

func (e *env) startProcess(cfg app.Config) *proc {
	e.t.Helper()
	args := []string{
		"--admin-addr", "127.0.0.1:0",
		"--log-format", "text",
		"--kafka-brokers", cfg.KafkaBrokers, "--topic-prefix", cfg.TopicPrefix, "--group", cfg.Group,
		"--redis-addr", cfg.RedisAddr, "--redis-key-prefix", cfg.RedisKeyPrefix,
		"--cassandra-hosts", cfg.CassandraHosts, "--cassandra-keyspace", cfg.CassandraKeyspace,
		"--postgres-dsn", cfg.PostgresDSN, "--clock-offset", cfg.ClockOffset.String(),
		"--signing-key-encryption-key-file", cfg.SigningKEKFile, "--worker-id", cfg.WorkerID,
		"--executors", strconv.Itoa(cfg.Executors), "--lease-ttl", cfg.LeaseTTL.String(),
		"--session-timeout", cfg.SessionTimeout.String(), "--revoke-drain-timeout", cfg.RevokeDrainTimeout.String(),
		"--liveness-ttl", cfg.LivenessTTL.String(),
		"--commit-interval", cfg.CommitInterval.String(), "--allow-kafka-targets", cfg.AllowKafkaTargets,
		"--allow-target-addrs", cfg.AllowTargetAddrs, "--max-deliveries", strconv.Itoa(cfg.MaxDeliveries),
		"--fetch-ahead", cfg.FetchAhead.String(),
	}
	return e.startBinary(workerBinary, cfg.WorkerID, args)
}

// startRelay runs the real relay over the env's outbox and topics.
func (e *env) startRelay() *proc {
	e.t.Helper()
	return e.startBinary(relayBinary, "relay", []string{
		"--admin-addr", "127.0.0.1:0", "--log-format", "text",
		"--postgres-dsn", e.dsn, "--kafka-brokers", strings.Join(testinfra.KafkaBrokers(e.t), ","),
		"--topic-prefix", e.topics.Prefix, "--node-id", "relay-" + e.topics.Prefix, "--poll-interval", "500ms",
	})
}

func (e *env) startBinary(binary, name string, args []string) *proc {
	e.t.Helper()
	logPath := filepath.Join(e.t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = f.Close(); close(p.done) }()
	e.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(40 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if e.t.Failed() {
			b, _ := os.ReadFile(logPath)
			e.t.Logf("%s log:\n%s", name, tail(string(b), 60))
		}
	})
	// The admin server logs its bound address; wait for it, then for /readyz.
	eventually(e.t, 30*time.Second, name+" admin address", func() bool {
		p.admin = adminAddr(logPath)
		return p.admin != ""
	})
	eventually(e.t, 60*time.Second, name+" ready", func() bool {
		resp, err := http.Get("http://" + p.admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}

func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil { // SIGKILL: no drain, no commit, no leave
		t.Fatal(err)
	}
	<-p.done
}

// metric reads one sample value from the worker's /metrics ("" labels: the
// unlabelled series).
func (p *proc) metric(name string) (float64, bool) {
	resp, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+" ") {
			v, err := strconv.ParseFloat(strings.TrimPrefix(line, name+" "), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// rssBytes is the process's resident set size.
func (p *proc) rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

func adminAddr(logPath string) string {
	b, _ := os.ReadFile(logPath)
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.Contains(line, "admin server listening") {
			continue
		}
		if i := strings.Index(line, "addr="); i >= 0 {
			return strings.Fields(line[i+len("addr="):])[0]
		}
	}
	return ""
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// firing builds an envelope for job's slot at scheduled aimed at the sink.
func (e *env) firing(jobID uuid.UUID, scheduled time.Time, p sundialv1.Priority) *sundialv1.Firing {
	return &sundialv1.Firing{
		ExecutionId:   firing.ExecutionID(jobID, scheduled).String(),
		JobId:         jobID.String(),
		Tenant:        "acme",
		JobVersion:    1,
		Attempt:       1,
		Priority:      p,
		ScheduledTime: timestamppb.New(scheduled),
		FireTime:      timestamppb.New(scheduled),
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{
			Url: e.sink.srv.URL + "/hook", Headers: map[string]string{"X-Job": jobID.String()},
		}}},
		Payload: []byte(`{"job":"` + jobID.String() + `"}`),
	}
}

// produce publishes envelopes as the relay does: to the priority's topic,
// keyed by job id. topicFor overrides the topic (duplicates on another one).
func (e *env) produce(fs []*sundialv1.Firing, topicFor func(*sundialv1.Firing) string) map[string]int64 {
	e.t.Helper()
	var recs []*kgo.Record
	for _, f := range fs {
		v, err := firing.Encode(f)
		if err != nil {
			e.t.Fatal(err)
		}
		topic := e.topics.Fire(f.GetPriority())
		if topicFor != nil {
			topic = topicFor(f)
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(f.GetJobId()), Value: v})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := e.kafka.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		e.t.Fatal(err)
	}
	offs := map[string]int64{}
	for _, r := range res {
		f, _ := firing.Decode(r.Record.Value)
		offs[f.GetExecutionId()] = r.Record.Offset
	}
	return offs
}

// committed is the group's committed offset of topic/partition (-1: none).
func (e *env) committed(topic string, partition int32) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := e.adm.FetchOffsets(ctx, e.group)
	if err != nil {
		return -2
	}
	o, ok := offs.Lookup(topic, partition)
	if !ok {
		return -1
	}
	return o.At
}

// arrival is one request the sink received.
type arrival struct {
	exec, job, attempt string
	fence              int64
	scheduled          time.Time
	received           time.Time
	catchUp            bool
	auth               string
}

// sink is the HTTP target: it verifies every request's signature and
// headers and records what arrived.
type sink struct {
	t    *testing.T
	keys *harness.Keys // the tenants' signing keys, which verify every request
	srv  *httptest.Server

	mu       sync.Mutex
	arrivals []arrival
	problems []string
	// hold makes the sink block the named execution until the channel closes.
	hold map[string]chan struct{}
	// script answers the nth request of a job (by job id) with script[n];
	// past the end, and for jobs without one, 200 "ok".
	script map[string][]reply
	perJob map[string]int
	// callbacks are the completion notifications received on /callback.
	callbacks []callback
	// cancels are the cancel notices received on /cancel (the jobs'
	// cancel_url).
	cancels []callback
	// inflight and peak count each job's requests being answered now, and
	// the most at once.
	inflight, peak map[string]int
}

// reply is a scripted answer.
type reply struct {
	status int
	header map[string]string
	// echo answers with the request's Authorization header (a target that
	// echoes its request, to test redaction).
	echo bool
	// hang never answers: the request waits until the worker gives up on
	// it (a target slower than the attempt timeout).
	hang bool
	// delay answers after this long (a slow target).
	delay time.Duration
}

// callback is one completion notification as the sink received it.
type callback struct {
	header http.Header
	body   []byte
	sigErr error
}

func newSink(t *testing.T, keys *harness.Keys) *sink {
	s := &sink{t: t, keys: keys, hold: map[string]chan struct{}{}, script: map[string][]reply{}, perJob: map[string]int{},
		inflight: map[string]int{}, peak: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	body, _ := io.ReadAll(r.Body)
	h := r.Header
	if r.URL.Path == "/callback" || r.URL.Path == "/cancel" {
		err := s.keys.Verify(h.Get(firing.HeaderSignature), h.Get(firing.HeaderExecutionID), body, received, time.Minute)
		s.mu.Lock()
		if r.URL.Path == "/cancel" {
			s.cancels = append(s.cancels, callback{header: h.Clone(), body: body, sigErr: err})
		} else {
			s.callbacks = append(s.callbacks, callback{header: h.Clone(), body: body, sigErr: err})
		}
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	a := arrival{
		exec: h.Get(firing.HeaderExecutionID), job: h.Get(firing.HeaderJobID), attempt: h.Get(firing.HeaderAttempt),
		received: received, catchUp: h.Get(firing.HeaderCatchUp) == "true",
	}
	var problems []string
	if err := s.keys.Verify(h.Get(firing.HeaderSignature), a.exec, body, received, time.Minute); err != nil {
		problems = append(problems, fmt.Sprintf("%s: signature: %v", a.exec, err))
	}
	if h.Get(firing.HeaderIdempotencyKey) != a.exec || a.exec == "" {
		problems = append(problems, fmt.Sprintf("%s: Idempotency-Key %q", a.exec, h.Get(firing.HeaderIdempotencyKey)))
	}
	if h.Get("X-Job") != a.job {
		problems = append(problems, fmt.Sprintf("%s: job header X-Job %q, job %q", a.exec, h.Get("X-Job"), a.job))
	}
	if string(body) != `{"job":"`+a.job+`"}` {
		problems = append(problems, fmt.Sprintf("%s: body %q", a.exec, body))
	}
	var err error
	if a.fence, err = strconv.ParseInt(h.Get(firing.HeaderFenceToken), 10, 64); err != nil || a.fence <= 0 {
		problems = append(problems, fmt.Sprintf("%s: fence %q", a.exec, h.Get(firing.HeaderFenceToken)))
	}
	if a.scheduled, err = time.Parse(time.RFC3339Nano, h.Get(firing.HeaderScheduledAt)); err != nil {
		problems = append(problems, fmt.Sprintf("%s: scheduled-at %q", a.exec, h.Get(firing.HeaderScheduledAt)))
	}
	a.auth = h.Get("Authorization")
	s.mu.Lock()
	s.arrivals = append(s.arrivals, a)
	s.problems = append(s.problems, problems...)
	hold := s.hold[a.exec]
	rep := reply{status: http.StatusOK}
	if sc := s.script[a.job]; s.perJob[a.job] < len(sc) {
		rep = sc[s.perJob[a.job]]
	}
	s.perJob[a.job]++
	s.inflight[a.job]++
	s.peak[a.job] = max(s.peak[a.job], s.inflight[a.job])
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight[a.job]--
		s.mu.Unlock()
	}()
	if hold != nil {
		// A worker that abandons the request (a cancel) hangs up.
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}
	if rep.delay > 0 {
		select {
		case <-time.After(rep.delay):
		case <-r.Context().Done():
		}
	}
	if rep.hang {
		<-r.Context().Done()
		return
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.status)
	if rep.echo {
		_, _ = w.Write([]byte("unauthorized: " + a.auth))
		return
	}
	if rep.status == http.StatusOK {
		_, _ = w.Write([]byte("ok"))
		return
	}
	_, _ = w.Write([]byte("status " + strconv.Itoa(rep.status)))
}

// setScript scripts the answers to job's requests.
func (s *sink) setScript(job string, replies ...reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script[job] = replies
}

func (s *sink) ofJob(job string) []arrival {
	var out []arrival
	for _, a := range s.snapshot() {
		if a.job == job {
			out = append(out, a)
		}
	}
	return out
}

func (s *sink) callbacksSnapshot() []callback {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.callbacks)
}

func (s *sink) cancelsSnapshot() []callback {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cancels)
}

func (s *sink) peakOf(job string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak[job]
}

func (s *sink) snapshot() []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.arrivals)
}

func (s *sink) distinct() int {
	seen := map[string]bool{}
	for _, a := range s.snapshot() {
		seen[a.exec] = true
	}
	return len(seen)
}

func (s *sink) checkProblems(t *testing.T) {
	t.Helper()
	s.checkProblemsBut(t, "")
}

// checkProblemsBut is checkProblems leaving out the problems that contain
// expected ("" leaves out none).
func (s *sink) checkProblemsBut(t *testing.T, expected string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.problems {
		if expected != "" && strings.Contains(p, expected) {
			continue
		}
		if n++; n > 20 {
			t.Errorf("… and more")
			break
		}
		t.Error(p)
	}
}

// eventually polls cond until it holds: the events waited for (a broker
// commit, a process becoming ready, requests arriving) happen in other
// processes, so there is no signal to wait on.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		<-tick.C
	}
}

// latenessReport logs received − scheduled percentiles.
func latenessReport(t *testing.T, label string, arr []arrival) (p50, p99 time.Duration) {
	t.Helper()
	var ds []time.Duration
	for _, a := range arr {
		ds = append(ds, a.received.Sub(a.scheduled))
	}
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	p50 = ds[len(ds)*50/100]
	p99 = ds[min(len(ds)-1, len(ds)*99/100)]
	t.Logf("lateness at the target (received − scheduled) %s: n=%d min=%s p50=%s p99=%s max=%s",
		label, len(ds), ds[0], p50, p99, ds[len(ds)-1])
	return p50, p99
}
