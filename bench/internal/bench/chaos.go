package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// ChaosConfig is the fault matrix: open-loop load (Rate jobs firing every
// second at the sink, HangJobs more at a second target that can hang) on a
// deployment with two of every service, and one fault at a time, each
// ended and recovered from before the next.
type ChaosConfig struct {
	Rows     []string // fault names, in order (ChaosRows)
	Rate     int
	HangJobs int
	// Baseline is how long the load runs before the first fault; its
	// lateness is what each fault's is compared with.
	Baseline time.Duration
	// Outage is how long Redis and Kafka stay down; LongOutage Postgres
	// and ZooKeeper, and how long the ledger refuses; CassandraOutage
	// Cassandra. Hang is how long the second
	// target hangs.
	Outage, LongOutage, CassandraOutage, Hang time.Duration
	// Recover is the least time after a fault ends before the next starts;
	// the next also waits until the last seconds' firings are on time again
	// (at most RecoverMax).
	Recover, RecoverMax time.Duration
	// SkewWorker is the clock offset of the worker the clock row adds.
	SkewWorker time.Duration
	// Loaded is the kill-worker-loaded row: the worker-kill scenario run
	// on the matrix's deployment, its own load on top of Rate.
	Loaded WorkerKillConfig
	// Infra runs deploy/local/infra.sh with args (stop C, start C).
	Infra func(ctx context.Context, args ...string) error
	// Cluster runs deploy/local/cluster/<component>.sh with args (kill,
	// leader, promote, up, ...) and returns what it printed, for the rows
	// of ChaosClusterRows.
	Cluster func(ctx context.Context, component string, args ...string) (string, error)
}

// ChaosRows names every fault in the order a full matrix takes them: the
// process kills first, then the component outages, the longest last.
var ChaosRows = []string{
	"kill-relay", "kill-api", "kill-prefetcher-leader", "kill-worker", "kill-worker-loaded",
	"redis-flush", "redis-restart", "kafka-restart", "worker-cut-redis", "worker-cut-kafka",
	"worker-drop-redis", "worker-drop-kafka", "target-hang", "worker-clock-ahead",
	"cassandra-refuses", "postgres-stop", "zookeeper-stop", "cassandra-stop",
}

// ChaosQuickRows is the subset `make test` runs. None of them stops a
// component, so it is safe beside other tests on shared components.
var ChaosQuickRows = []string{"kill-worker", "kill-prefetcher-leader", "redis-flush", "kill-worker-loaded"}

// fault is one row of the matrix.
type fault struct {
	name     string
	what     string // the fault as the table names it
	expected string // what the design says should happen
	// inject applies the fault and ends it: processes killed are replaced,
	// components stopped are started again. It returns once they are back,
	// with a note on what it saw (e.g. how long a component was down).
	inject func(ctx context.Context) (note string, err error)
	// prepare, when set, runs before the row starts, and after once it has
	// ended, each followed by the usual wait for the platform to be on time
	// again: what they do, such as a worker joining and leaving the group,
	// is not the fault's cost. after's note is added to the row's.
	prepare func(ctx context.Context) error
	after   func(ctx context.Context) (note string, err error)
}

func (c *chaos) faults() map[string]fault {
	cfg := c.cfg
	return map[string]fault{
		"kill-relay": {what: "kill -9 a relay (another running)",
			expected: "none: the other relay claims the outbox, and firings are published up to the window ahead",
			inject:   func(ctx context.Context) (string, error) { return c.killAndReplace(ctx, "relay") }},
		"kill-api": {what: "kill -9 an api (another running)",
			expected: "none: firings never pass through the api; the other api keeps serving",
			inject:   c.killAPI},
		"kill-prefetcher-leader": {what: "kill -9 a prefetcher leading ranges (another running)",
			expected: "none: 2 min of firings are staged; the other prefetcher leads the dead one's ranges within the ZooKeeper session timeout",
			inject:   c.killLeader},
		"kill-worker": {what: "kill -9 a worker (another running)",
			expected: "the dead worker's held firings are late by failure detection + rebalance (target: ≤ 2 s)",
			inject:   func(ctx context.Context) (string, error) { return c.killAndReplace(ctx, "worker") }},
		"kill-worker-loaded": {what: fmt.Sprintf("kill -9 a worker (another running) under %d/s more (the worker-kill scenario)", cfg.Loaded.Rate),
			expected: "as kill-worker, at a rate where the platform can fall behind: its partitions' firings late by failure detection + takeover only (target at 1,000/s: ≤ 2 s max); 0 lost, 0 duplicate effects, 0 poison",
			inject:   c.killWorkerLoaded},
		"redis-flush": {what: "Redis loses its data (the deployment's keys deleted, no downtime)",
			expected: "no duplicate effect: fences stay monotonic (floored by the clock), done markers are only an optimisation",
			inject:   c.flushRedis},
		"redis-restart": {what: fmt.Sprintf("Redis stopped for %s and started again (empty: no persistence)", cfg.Outage),
			expected: "firings leased before the outage fire on time; the others wait for Redis (target: 0 for leased ones)",
			inject:   func(ctx context.Context) (string, error) { return c.outage(ctx, "redis", cfg.Outage) }},
		"kafka-restart": {what: fmt.Sprintf("Kafka broker stopped for %s and started again", cfg.Outage),
			expected: "firings already held by workers fire on time (target: 0 added); publishing waits for the broker",
			inject:   func(ctx context.Context) (string, error) { return c.outage(ctx, "kafka", cfg.Outage) }},
		"worker-cut-redis": {what: fmt.Sprintf("a third worker, in a network namespace of its own, cut off from Redis for %s (its connections closed, new ones refused; Redis up for the others)", cfg.Outage),
			expected: "its firings leased before the cut (up to --prepare-lead ahead) fire on time; its partitions' later firings wait for Redis (up to the cut); the other workers' stay on time; 0 lost, 0 duplicate effects (raw duplicates allowed)",
			prepare:  c.startIsolated, after: c.leaveIsolated,
			inject: func(ctx context.Context) (string, error) { return c.isolate(ctx, "redis", cut) }},
		"worker-cut-kafka": {what: fmt.Sprintf("a third worker, in a network namespace of its own, cut off from Kafka for %s (its connections closed, new ones refused; the broker up for the others)", cfg.Outage),
			expected: "firings it already holds keep firing on time (the lease, not the group, decides who fires); the others may take its partitions over and find those firings leased or done; 0 added, 0 lost, 0 duplicate effects (raw duplicates allowed)",
			prepare:  c.startIsolated, after: c.leaveIsolated,
			inject: func(ctx context.Context) (string, error) { return c.isolate(ctx, "kafka", cut) }},
		"worker-drop-redis": {what: fmt.Sprintf("a third worker, in a network namespace of its own, whose packets to Redis are dropped for %s (connections stay open, no byte passes either way, new ones hang; Redis up for the others)", cfg.Outage),
			expected: "as the cut, learned from the worker's own timeouts instead of a closed connection: its firings leased before the drop fire on time; its partitions' later firings wait for Redis; 0 lost, 0 duplicate effects (raw duplicates allowed)",
			prepare:  c.startIsolated, after: c.leaveIsolated,
			inject: func(ctx context.Context) (string, error) { return c.isolate(ctx, "redis", stall) }},
		"worker-drop-kafka": {what: fmt.Sprintf("a third worker, in a network namespace of its own, whose packets to Kafka are dropped for %s (connections stay open, no byte passes either way, new ones hang; the broker up for the others)", cfg.Outage),
			expected: "as the cut: firings it already holds keep firing on time under their leases; after the session timeout the others take its partitions; 0 added, 0 lost, 0 duplicate effects (raw duplicates allowed)",
			prepare:  c.startIsolated, after: c.leaveIsolated,
			inject: func(ctx context.Context) (string, error) { return c.isolate(ctx, "kafka", stall) }},
		"target-hang": {what: fmt.Sprintf("a second target hangs for %s (%d jobs, attempt timeout 10 s)", cfg.Hang, cfg.HangJobs),
			expected: "the hung target's attempts hold executors until their timeout; the other target's firings stay on time",
			inject:   c.hangTarget},
		"worker-clock-ahead": {what: fmt.Sprintf("a worker whose clock is %s ahead joins", cfg.SkewWorker),
			expected: "none early or late: the worker measures its offset from Postgres and fires by database time",
			inject:   c.skewedWorker},
		"postgres-stop": {what: fmt.Sprintf("Postgres stopped for %s and started again", cfg.LongOutage),
			expected: "none: the window (2 min) was staged and published before; staging resumes after",
			inject:   func(ctx context.Context) (string, error) { return c.outage(ctx, "postgres", cfg.LongOutage) }},
		"zookeeper-stop": {what: fmt.Sprintf("ZooKeeper stopped for %s (sessions expire) and started again", cfg.LongOutage),
			expected: "none: leaders step down, staged firings keep flowing; staging resumes when a leader is elected again",
			inject:   func(ctx context.Context) (string, error) { return c.outage(ctx, "zookeeper", cfg.LongOutage) }},
		"redis-cluster-primary-kill": {what: fmt.Sprintf("a primary of the Redis Cluster killed (-9), its replica promoted; the node started again %s after the kill, as a replica", cfg.Outage),
			expected: "firings leased before the kill fire on time; the dead primary's slots answer again once its replica is promoted (cluster-node-timeout 2 s + the election); 0 lost, 0 duplicate effects, 0 poison; added lateness ≤ the failover + 2 s",
			inject:   c.redisClusterPrimaryKill},
		"zookeeper-leader-kill": {what: fmt.Sprintf("the ZooKeeper ensemble's leader killed (-9); started again %s after the kill", cfg.Outage),
			expected: "none: the survivors elect a leader in under a second; the prefetchers' sessions reconnect to a survivor and keep their ranges and epochs; 2 min of firings are staged ahead; 0 lost, 0 duplicate effects, 0 poison",
			inject:   c.zookeeperLeaderKill},
		"zookeeper-member-stall": {what: fmt.Sprintf("the ZooKeeper follower most clients are connected to stopped (SIGSTOP) for %s, then let go on (SIGCONT): silent to the leader and to its clients on open connections", cfg.Outage),
			expected: "none: the majority keeps the ensemble; the prefetchers' sessions on the stalled member move to another server within their timeout and keep their ranges and epochs (or step down and are elected again); 2 min of firings are staged ahead; 0 lost, 0 duplicate effects, 0 poison",
			inject:   c.zookeeperMemberStall},
		"kafka-broker-kill": {what: fmt.Sprintf("the Kafka broker leading the most firing partitions killed (-9), 3 brokers, RF 3, min.insync.replicas 2; started again %s after the kill", cfg.Outage),
			expected: "firings the workers already hold fire on time; the dead broker's partitions wait for their new leaders (the brokers fence a silent peer after 3 s); 0 lost, 0 duplicate effects, 0 poison; added lateness ≤ the leaders' move + 2 s",
			inject:   c.kafkaBrokerKill},
		"cassandra-node-kill": {what: fmt.Sprintf("node 1 of the 3-node Cassandra ring (the seed, the first contact point) killed (-9) for %s, then started again", cfg.CassandraOutage),
			expected: "none: the ledger at replication factor 3 and LOCAL_QUORUM needs two of three nodes; history stays readable; the node back gets what it missed by hints; 0 lost, 0 duplicate effects, 0 poison",
			inject:   c.cassandraNodeKill},
		"postgres-primary-kill": {what: "the Postgres primary stopped as a crash does (pg_ctl stop -m immediate), the synchronous standby promoted at once; the old primary rebuilt as its standby",
			expected: "none: the window (2 min) was staged and published before; the services' pools find the promoted node (target_session_attrs=read-write); 0 lost, 0 duplicate effects, 0 poison",
			inject:   c.postgresPrimaryKill},
		"cassandra-refuses": {what: fmt.Sprintf("the ledger answers every read and write with an error for %s (Cassandra up; its keyspace's replication raised past the nodes, so LOCAL_QUORUM is unavailable)", cfg.LongOutage),
			expected: "none: firing does not wait for the ledger; the workers spill the records to Postgres and the drain lands them after; the ledger's history is whole at the end; 0 lost, 0 duplicate effects, 0 poison",
			inject:   c.ledgerRefuses},
		"cassandra-stop": {what: fmt.Sprintf("Cassandra stopped for %s and started again", cfg.CassandraOutage),
			expected: "none: ledger writes wait in bounded writers (spilling rather than losing) and land after",
			inject:   func(ctx context.Context) (string, error) { return c.outage(ctx, "cassandra", cfg.CassandraOutage) }},
	}
}

// chaos is one run of the matrix.
type chaos struct {
	r    *Runner
	cfg  ChaosConfig
	d    *deployment
	hung *harness.Sink
	jobs *jobSet
	// hungIDs are the jobs whose target is hung.
	hungIDs map[uuid.UUID]bool
	// spawned counts replacement processes, for their names.
	spawned int
	// loaded is what the kill-worker-loaded row's scenario reported.
	loaded []Result
	// iso is the worker in a network namespace of its own, while a row
	// that cuts it off runs.
	iso *isolated
	// start and end bound the measured slots (end is far until the matrix
	// is over).
	start, end time.Time
	// baseP99 is the baseline's lateness p99: what a firing is late by
	// without a fault. threshold is the lateness above which a firing
	// counts as late: the baseline's maximum plus a quarter second.
	baseP99, threshold time.Duration
}

// chaosRow is what one fault did, in time.
// phasedRows are the component outages whose rows are also reported by
// phase (see outagePhases), as the cut rows are: what was leased or held
// before the outage is what the outage targets speak of.
var phasedRows = []string{"redis-restart", "kafka-restart"}

type chaosRow struct {
	f                  fault
	start, over, ended time.Time // fault applied, fault ended (all back), row ended
	note               string
	// skipped are the firings the workers skipped by misfire policy from
	// the fault until the row ended.
	skipped int
}

// Chaos runs the fault matrix and returns one table row per fault.
func (r *Runner) Chaos(ctx context.Context, cfg ChaosConfig) (res Result, err error) {
	res = Result{Scenario: "chaos", Header: []string{"fault", "expected", "firings", "delivered", "lost", "skipped by misfire policy", "dup effects", "raw dups",
		"added lateness p99 / max", "time to recover", "seen"}}
	if cfg.Infra == nil {
		return res, errors.New("chaos: no infra.sh runner")
	}
	c := &chaos{r: r, cfg: cfg}
	known := c.faults()
	for _, name := range cfg.Rows {
		if _, ok := known[name]; !ok {
			return res, fmt.Errorf("chaos: unknown fault %q (known: %s)", name, strings.Join(ChaosRows, ", "))
		}
	}
	if err := c.netnsPreflight(ctx); err != nil {
		return res, err
	}
	// The hung sink verifies with the deployment's tenant keys, which
	// exist once the deployment (started after it, on its address) does.
	var keys atomic.Pointer[harness.Keys]
	later := harness.NewKeys(harness.KeySourceFunc(func(ctx context.Context) (map[string][]signingkey.Key, []signingkey.Unopened, error) {
		if k := keys.Load(); k != nil {
			return k.Valid(ctx)
		}
		return nil, nil, errors.New("bench: no deployment yet")
	}))
	if c.hung, err = harness.NewSink(later, harness.SinkClock(r.clock)); err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, c.hung.Close()) }()
	if c.d, err = r.deploy(ctx, "chaos", topology{apis: 2, prefetchers: 2, relays: 2, workers: 2, ranges: r.opts.Deploy.Ranges, extraTargets: []string{c.hung.Addr()}}); err != nil {
		return res, err
	}
	keys.Store(c.d.sink.Keys())
	defer func() {
		if cerr := c.d.close(context.WithoutCancel(ctx), false); cerr != nil {
			r.log.Warn("deployment not cleaned up", "err", cerr)
		}
	}()
	res.Deployment = c.d.describe()
	// Before the deployment closes: the isolated worker, its forwarders and
	// its namespace, whichever way the matrix ends.
	defer func() {
		if cerr := c.stopIsolated(context.WithoutCancel(ctx)); cerr != nil {
			r.log.Warn("chaos: isolated worker not cleaned up", "err", cerr)
		}
	}()

	mark := c.d.markMisfires(ctx)
	start := r.clock.Now().Add(r.lead(cfg.Rate + cfg.HangJobs)).Truncate(time.Second)
	// The jobs go on until they are deleted at the end: a matrix's length
	// depends on how long each fault takes to recover from.
	far := start.Add(6 * time.Hour)
	main, err := c.d.registerRate(ctx, "chaos", cfg.Rate, start, far)
	if err != nil {
		return res, err
	}
	hung, err := c.d.register(ctx, "chaos-hang", cfg.HangJobs, func(i int) *sundialv1.Job {
		j := rateJob(fmt.Sprintf("chaos-hang-%04d", i), c.hung.URL(), start, far, sundialv1.Priority_PRIORITY_MEDIUM, r.opts.Jitter)
		j.AttemptTimeout = durationpb.New(10 * time.Second)
		// Retried, so that a firing whose attempts time out, or fail fast
		// while the host's breaker is open, still reaches the target once
		// it answers again: lost stays a promise broken, not a policy.
		j.Retry = &sundialv1.RetryPolicy{MaxAttempts: 10, Backoff: sundialv1.Backoff_BACKOFF_EXPONENTIAL,
			InitialDelay: durationpb.New(time.Second), MaxDelay: durationpb.New(5 * time.Second)}
		return j
	})
	if err != nil {
		return res, err
	}
	c.jobs = main.merge(newJobSet(hung))
	c.start, c.end = start, far
	c.hungIDs = jobIDs(hung)
	if err := r.checkLead(start, 2*time.Second); err != nil {
		return res, err
	}
	r.log.Info("chaos: load registered", "jobs", len(c.jobs.jobs), "first", start.Format(time.TimeOnly))

	// The baseline: the load alone.
	if err := sleepUntil(ctx, r.clock, start.Add(cfg.Baseline+r.opts.Jitter+2*time.Second)); err != nil {
		return res, err
	}
	base, err := c.window(start, start.Add(cfg.Baseline))
	if err != nil {
		return res, err
	}
	bs := harness.Summarize(base.Lateness)
	c.baseP99, c.threshold = bs.P99, bs.Max+250*time.Millisecond
	res.detailf("chaos: baseline (%s of load before the first fault): %s; added lateness is lateness beyond its p99 (%s); a firing later than its max + 250 ms (%s) counts as late",
		cfg.Baseline, bs, FormatLatency(c.baseP99), FormatLatency(c.threshold))

	var rows []chaosRow
	for _, name := range cfg.Rows {
		f := known[name]
		f.name = name
		if f.prepare != nil {
			if err := f.prepare(ctx); err != nil {
				return res, fmt.Errorf("chaos: %s: %w", name, err)
			}
			if err := c.settle(ctx, r.clock.Now()); err != nil {
				return res, err
			}
		}
		rowMark := c.d.markMisfires(ctx)
		row := chaosRow{f: f, start: r.clock.Now()}
		r.log.Info("chaos: fault", "fault", name)
		note, err := f.inject(ctx)
		if err != nil {
			return res, fmt.Errorf("chaos: %s: %w", name, err)
		}
		row.over, row.note = r.clock.Now(), note
		if err := c.settle(ctx, row.over); err != nil {
			return res, err
		}
		row.ended = r.clock.Now()
		row.skipped = c.d.skippedSince(ctx, rowMark)
		r.log.Info("chaos: fault over", "fault", name, "note", note, "row_took", row.ended.Sub(row.start).Round(time.Second))
		rows = append(rows, row)
		if f.after != nil {
			more, err := f.after(ctx)
			if err != nil {
				return res, fmt.Errorf("chaos: %s: %w", name, err)
			}
			if more != "" {
				rows[len(rows)-1].note += "; " + more
			}
			if err := c.settle(ctx, r.clock.Now()); err != nil {
				return res, err
			}
		}
	}
	end := r.clock.Now().Truncate(time.Second)
	c.end = end

	want, err := c.jobs.slots(start, end)
	if err != nil {
		return res, err
	}
	if err := c.await(ctx, want, end.Add(3*time.Minute), 5*time.Second); err != nil {
		return res, err
	}
	skipped := c.d.skippedSince(ctx, mark)
	deliveries := c.deliveries()
	// Every firing that reached a target has its final record in the
	// ledger, whatever the matrix stopped (Cassandra included): read back
	// through the api, before the jobs and their history are deleted.
	delivered, gaps, err := c.d.ledgerGaps(ctx, want, deliveries, r.clock.Now().Add(2*time.Minute))
	if err != nil {
		return res, err
	}
	res.detailf("chaos: ledger: %d of the %d executions that reached a target have their final record in the history the api shows", delivered-len(gaps), delivered)
	if len(gaps) > 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("chaos: %d executions reached a target but have no final record in the ledger (%s; for example %v)",
			len(gaps), c.gapsByRow(want, gaps, rows), gaps[:min(len(gaps), 5)]))
	}
	if err := c.d.deleteJobs(ctx, c.jobs.jobs); err != nil {
		r.log.Warn("chaos: jobs not deleted", "err", err)
	}
	for _, row := range rows {
		a := c.analyze(want, deliveries, row.start, row.ended)
		late, recovered := c.recovery(a, want, deliveries, row)
		res.Rows = append(res.Rows, []string{row.f.what, row.f.expected, fmt.Sprint(a.Expected), fmt.Sprint(a.Arrived), fmt.Sprint(lostBeyond(a.Missing, row.skipped)), fmt.Sprint(row.skipped),
			fmt.Sprint(a.DuplicateEffects), fmt.Sprint(a.RawDuplicates), late, recovered, row.note})
		res.detailf("chaos: %s: fault at %s, over at %s (%s), row ended at %s; firings due in the row: %s; early %d",
			row.f.name, row.start.Format(time.TimeOnly+".000"), row.over.Format(time.TimeOnly+".000"), row.over.Sub(row.start).Round(100*time.Millisecond),
			row.ended.Format(time.TimeOnly), harness.Summarize(a.Lateness), a.Early)
		if row.f.name == "target-hang" {
			for _, part := range []struct {
				what string
				hung bool
			}{{"the sink's", false}, {"the hung target's", true}} {
				sub := want.Filter(func(s harness.Slot) bool { return c.hungIDs[s.JobID] == part.hung })
				pa := c.analyze(sub, deliveries, row.start, row.ended)
				res.detailf("chaos: target-hang: %s firings: %d due, %d delivered, %d raw duplicates (retried attempts), %s",
					part.what, pa.Expected, pa.Arrived, pa.RawDuplicates, harness.Summarize(pa.Lateness))
			}
		}
		if slices.Contains(netnsRows, row.f.name) || slices.Contains(phasedRows, row.f.name) {
			for _, ph := range c.outagePhases(row) {
				pa := c.analyze(want, deliveries, ph.from, ph.to)
				res.detailf("chaos: %s: firings due %s: %d due, %d delivered, %d raw duplicates, %s",
					row.f.name, ph.what, pa.Expected, pa.Arrived, pa.RawDuplicates, harness.Summarize(pa.Lateness))
			}
		}
		res.Details = append(res.Details, skippedNote("chaos: "+row.f.name, a.Missing, row.skipped))
		res.Problems = append(res.Problems, problems("chaos "+row.f.name, a, row.skipped)...)
	}
	for _, l := range c.loaded {
		res.Details = append(res.Details, l.Details...)
		res.Problems = append(res.Problems, l.Problems...)
	}
	all := c.analyze(want, deliveries, start, end)
	res.detailf("chaos: all %d firings from %s to %s: %s; lost %d, skipped by misfire policy %d, duplicate effects %d, raw duplicates %d",
		all.Expected, start.Format(time.TimeOnly), end.Format(time.TimeOnly), harness.Summarize(all.Lateness), lostBeyond(all.Missing, skipped), skipped,
		all.DuplicateEffects, all.RawDuplicates)
	res.Details = append(res.Details, skippedNote("chaos (whole run)", all.Missing, skipped))
	res.Problems = append(res.Problems, problems("chaos (whole run)", all, skipped)...)
	return res, nil
}

// gapsByRow says in which rows the executions of gaps were due, and
// between which fire instants, so a missing record points at the fault
// that lost it.
func (c *chaos) gapsByRow(want harness.Expected, gaps []uuid.UUID, rows []chaosRow) string {
	type span struct {
		n           int
		first, last time.Time
	}
	spans := map[string]*span{}
	for _, id := range gaps {
		at := want[id].FireAt
		where := "between rows"
		if len(rows) == 0 || at.Before(rows[0].start) {
			where = "the baseline"
		}
		for _, row := range rows {
			if !at.Before(row.start) && at.Before(row.ended) {
				where = row.f.name
				break
			}
		}
		sp := spans[where]
		if sp == nil {
			sp = &span{first: at, last: at}
			spans[where] = sp
		}
		sp.n++
		if at.Before(sp.first) {
			sp.first = at
		}
		if at.After(sp.last) {
			sp.last = at
		}
	}
	var parts []string
	for where, sp := range spans {
		parts = append(parts, fmt.Sprintf("%d due in %s (%s–%s)", sp.n, where,
			sp.first.Format(time.TimeOnly+".000"), sp.last.Format(time.TimeOnly+".000")))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// awaitStall is how long await goes on once every slot it waits for is
// past its instant and no missing firing has arrived: a firing the
// platform skipped by its job's misfire policy never arrives, and one still
// on its way after a takeover or a redelivery arrives within seconds.
const awaitStall = 45 * time.Second

// await waits (until deadline) for every slot of want at its target, then
// quiet more for late duplicates; slots still missing then are left to the
// analysis to count (as skipped by misfire policy, or lost). It stops
// early, the same way, once nothing missing has arrived for awaitStall after
// the last slot's instant: waiting to the deadline would only add time.
func (c *chaos) await(ctx context.Context, want harness.Expected, deadline time.Time, quiet time.Duration) error {
	mainWant := want.Filter(func(s harness.Slot) bool { return !c.hungIDs[s.JobID] })
	hungWant := want.Filter(func(s harness.Slot) bool { return c.hungIDs[s.JobID] })
	var last time.Time
	for _, s := range want {
		if s.FireAt.After(last) {
			last = s.FireAt
		}
	}
	fewest, progress := -1, c.r.clock.Now()
	for {
		missing := c.d.sink.Missing(mainWant) + c.hung.Missing(hungWant)
		if missing == 0 {
			break
		}
		now := c.r.clock.Now()
		if fewest < 0 || missing < fewest {
			fewest, progress = missing, now
		}
		if now.After(deadline) {
			c.r.log.Warn("chaos: firings still missing at the deadline", "missing", missing)
			return nil
		}
		if stalled := now.Sub(progress); stalled >= awaitStall && now.Sub(last) >= awaitStall {
			c.r.log.Warn("chaos: firings still missing, none arrived for a while; the analysis counts them",
				"missing", missing, "none_for", stalled.Round(time.Second))
			return Sleep(ctx, c.r.clock, quiet)
		}
		if err := Sleep(ctx, c.r.clock, time.Second); err != nil {
			return err
		}
	}
	return Sleep(ctx, c.r.clock, quiet)
}

// deliveries is everything both targets received, in arrival order per
// target (Analyze needs no global order but for raw duplicates, which are
// per execution and so per target).
func (c *chaos) deliveries() []harness.Delivery {
	return append(c.d.sink.Deliveries(), c.hung.Deliveries()...)
}

// analyze is the firings due (by fire instant) in [from, to).
func (c *chaos) analyze(want harness.Expected, got []harness.Delivery, from, to time.Time) harness.Analysis {
	sub := want.Filter(func(s harness.Slot) bool { return !s.FireAt.Before(from) && s.FireAt.Before(to) })
	return harness.Analyze(sub, got, func(dl harness.Delivery) bool {
		if !c.jobs.ids[dl.JobID] || dl.Scheduled.Before(c.start) || !dl.Scheduled.Before(c.end) {
			return true // another run's, or before or after the matrix
		}
		_, other := want[dl.ExecutionID]
		return other // a slot of the matrix outside this stretch
	})
}

// window analyses the firings due in [from, to) as they are now.
func (c *chaos) window(from, to time.Time) (harness.Analysis, error) {
	want, err := c.jobs.slots(from.Add(-2*time.Second), to)
	if err != nil {
		return harness.Analysis{}, err
	}
	return c.analyze(want, c.deliveries(), from, to), nil
}

// settle waits Recover after a fault ended, then until the firings due in
// the last five seconds arrived and none later than the threshold (at most
// RecoverMax), so the next fault starts on a healthy platform.
func (c *chaos) settle(ctx context.Context, over time.Time) error {
	if err := sleepUntil(ctx, c.r.clock, over.Add(c.cfg.Recover)); err != nil {
		return err
	}
	deadline := over.Add(c.cfg.RecoverMax)
	for {
		now := c.r.clock.Now()
		to := now.Add(-time.Second - c.r.opts.Jitter)
		a, err := c.window(to.Add(-5*time.Second), to)
		if err != nil {
			return err
		}
		if a.Missing == 0 && (len(a.Lateness) == 0 || a.Lateness[len(a.Lateness)-1] <= c.threshold) {
			return nil
		}
		if now.After(deadline) {
			c.r.log.Warn("chaos: not on time again before the next fault", "missing", a.Missing, "late_max", harness.Summarize(a.Lateness).Max)
			return nil
		}
		if err := Sleep(ctx, c.r.clock, time.Second); err != nil {
			return err
		}
	}
}

// recovery is a row's added lateness (p99 / max) and its time to recover:
// from the fault until the last firing due in the row that was late
// arrived. A row with a lost firing never recovered; firings its jobs'
// misfire policy skipped (row.skipped) are not lost, and the recovery is
// that of the firings that fired.
func (c *chaos) recovery(a harness.Analysis, want harness.Expected, got []harness.Delivery, row chaosRow) (late, recovered string) {
	// Added lateness is lateness beyond the baseline's p99, so the load's
	// own spread is not counted as the fault's.
	var added []time.Duration
	for _, l := range a.Lateness {
		added = append(added, max(l-c.baseP99, 0))
	}
	s := harness.Summarize(added)
	late = "0 / 0"
	if s.Max > 0 {
		late = FormatLatency(s.P99) + " / " + FormatLatency(s.Max)
	}
	if lostBeyond(a.Missing, row.skipped) > 0 {
		return late, "never (lost firings)"
	}
	first := map[uuid.UUID]time.Time{}
	for _, d := range got {
		if _, seen := first[d.ExecutionID]; !seen {
			first[d.ExecutionID] = d.Received
		}
	}
	var last time.Time
	for id, sl := range want {
		if sl.FireAt.Before(row.start) || !sl.FireAt.Before(row.ended) {
			continue
		}
		if at, ok := first[id]; ok && at.Sub(sl.FireAt) > c.threshold && at.After(last) {
			last = at
		}
	}
	if last.IsZero() {
		return late, "– (none late)"
	}
	return late, FormatLatency(last.Sub(row.start))
}

// killAndReplace kills (SIGKILL) the first running process of service and
// starts a replacement, as a supervisor would.
func (c *chaos) killAndReplace(ctx context.Context, service string) (string, error) {
	d := c.d
	ps := map[string]*[]*harness.Process{"relay": &d.relays, "worker": &d.workers}[service]
	victim := firstAlive(*ps)
	if victim == nil {
		return "", fmt.Errorf("no %s running", service)
	}
	d.noteMisfires(ctx) // a killed worker's skips count as last read
	if err := victim.Kill(); err != nil {
		return "", err
	}
	killed := c.r.clock.Now()
	pr, err := c.replace(ctx, service, nil)
	if err != nil {
		return "", err
	}
	*ps = append(*ps, pr)
	if service == "worker" {
		if err := d.awaitGroup(ctx, 1); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%s killed; replacement ready after %s", victim.Name, c.r.clock.Now().Sub(killed).Round(100*time.Millisecond)), nil
}

// replace starts a new process of service with the deployment's usual
// arguments plus extra.
func (c *chaos) replace(ctx context.Context, service string, extra []string) (*harness.Process, error) {
	c.spawned++
	name := fmt.Sprintf("%s-r%d", service, c.spawned)
	var args []string
	switch service {
	case "relay":
		args = []string{"--node-id", name}
	case "prefetcher":
		args = []string{"--node-id", name, "--window", c.r.opts.Window.String(), "--ranges", strconv.Itoa(c.d.topo.ranges)}
	case "worker":
		args = c.workerArgs(name)
	case "api":
		return c.d.plat.StartAPI(ctx, name)
	}
	return c.d.plat.Start(ctx, name, service, append(args, extra...)...)
}

// workerArgs are a worker's usual arguments, as the deployment's.
func (c *chaos) workerArgs(name string) []string {
	return append([]string{"--worker-id", name, "--executors", strconv.Itoa(c.r.opts.Executors)}, c.r.opts.WorkerArgs...)
}

func firstAlive(ps []*harness.Process) *harness.Process {
	for _, p := range ps {
		if p.Alive() {
			return p
		}
	}
	return nil
}

// killAPI kills the api the client does not use, checks the other keeps
// answering for a few seconds, and starts a replacement.
func (c *chaos) killAPI(ctx context.Context) (string, error) {
	d := c.d
	var victim *harness.Process
	for _, p := range d.apis[:len(d.apis)-1] {
		if p.Alive() {
			victim = p
			break
		}
	}
	if victim == nil {
		return "", errors.New("no second api running")
	}
	if err := victim.Kill(); err != nil {
		return "", err
	}
	calls, failed := 0, 0
	for until := c.r.clock.Now().Add(5 * time.Second); c.r.clock.Now().Before(until); calls++ {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := d.client.GetJob(cctx, &sundialv1.GetJobRequest{Id: c.jobs.jobs[calls%len(c.jobs.jobs)].GetId()})
		cancel()
		if err != nil {
			failed++
		}
		if err := Sleep(ctx, c.r.clock, 100*time.Millisecond); err != nil {
			return "", err
		}
	}
	pr, err := c.replace(ctx, "api", nil)
	if err != nil {
		return "", err
	}
	d.apis = append([]*harness.Process{pr}, d.apis...) // the client still talks to the last
	return fmt.Sprintf("%s killed; the other api answered %d of %d GetJob calls in the next 5 s", victim.Name, calls-failed, calls), nil
}

// killLeader kills a prefetcher that leads ranges (with --ranges 1, the
// leader), measures how long until the survivors lead every range, and
// starts a replacement.
func (c *chaos) killLeader(ctx context.Context) (string, error) {
	d := c.d
	old, served := prefetchVictim(ctx, d.prefetchers, d.topo.ranges)
	if old == nil {
		return "", errors.New("no prefetcher leads a range")
	}
	if err := old.Kill(); err != nil {
		return "", err
	}
	killed := c.r.clock.Now()
	took := "the others did not lead every range within 30 s"
	for deadline := killed.Add(30 * time.Second); c.r.clock.Now().Before(deadline); {
		if served() {
			took = fmt.Sprintf("the others led all %d ranges after %s", d.topo.ranges, FormatLatency(c.r.clock.Now().Sub(killed)))
			break
		}
		if err := Sleep(ctx, c.r.clock, 50*time.Millisecond); err != nil {
			return "", err
		}
	}
	pr, err := c.replace(ctx, "prefetcher", nil)
	if err != nil {
		return "", err
	}
	d.prefetchers = append(d.prefetchers, pr)
	return took, nil
}

// killWorkerLoaded runs the worker-kill scenario on the matrix's
// deployment: its own jobs at Loaded.Rate, one worker killed and replaced,
// its load deleted after. Its report joins the matrix's details and
// problems (lost, duplicated or poison firings fail the matrix).
func (c *chaos) killWorkerLoaded(ctx context.Context) (string, error) {
	res, err := c.r.WorkerKill(ctx, c.d, c.cfg.Loaded)
	if err != nil {
		return "", err
	}
	for i := range res.Details {
		res.Details[i] = "chaos: kill-worker-loaded: " + res.Details[i]
	}
	c.loaded = append(c.loaded, res)
	var cells []string
	for i, h := range res.Header {
		if i < len(res.Row) && i >= 2 { // offered and disturbance are the row's what
			cells = append(cells, h+" "+res.Row[i])
		}
	}
	return strings.Join(cells, "; "), nil
}

// flushRedis deletes every key of the deployment.
func (c *chaos) flushRedis(ctx context.Context) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: c.r.opts.Infra.RedisAddr})
	defer func() { _ = rdb.Close() }()
	n, err := rdb.DBSize(ctx).Result()
	if err != nil {
		return "", err
	}
	if err := harness.DeleteRedisPrefix(ctx, rdb, c.d.ns.RedisPrefix); err != nil {
		return "", err
	}
	return fmt.Sprintf("keys under %s deleted (%d keys in the instance before)", c.d.ns.RedisPrefix, n), nil
}

// outage stops component, waits for, and starts it again; the note is how
// long it was down (a JVM's start-up included).
func (c *chaos) outage(ctx context.Context, component string, down time.Duration) (string, error) {
	t0 := c.r.clock.Now()
	if err := c.cfg.Infra(ctx, "stop", component); err != nil {
		return "", err
	}
	stopped := c.r.clock.Now()
	if err := Sleep(ctx, c.r.clock, down); err != nil {
		return "", err
	}
	if err := c.cfg.Infra(context.WithoutCancel(ctx), "start", component); err != nil {
		return "", err
	}
	back := c.r.clock.Now()
	return fmt.Sprintf("down %s (stop took %s)", back.Sub(stopped).Round(100*time.Millisecond), stopped.Sub(t0).Round(100*time.Millisecond)), nil
}

// hangTarget makes the second target hang.
func (c *chaos) hangTarget(ctx context.Context) (string, error) {
	until := c.r.clock.Now().Add(c.cfg.Hang)
	c.hung.Hang(until)
	defer c.hung.Hang(time.Time{})
	return fmt.Sprintf("%d jobs' target hung", c.cfg.HangJobs), sleepUntil(ctx, c.r.clock, until)
}

// skewedWorker adds a worker whose clock is SkewWorker ahead, lets it fire
// for a while, and stops it gracefully.
func (c *chaos) skewedWorker(ctx context.Context) (string, error) {
	pr, err := c.replace(ctx, "worker", []string{"--clock-offset", c.cfg.SkewWorker.String()})
	if err != nil {
		return "", err
	}
	c.d.workers = append(c.d.workers, pr)
	owned := 0.0
	if err := Sleep(ctx, c.r.clock, 30*time.Second); err != nil {
		return "", err
	}
	if m, err := pr.Metrics(ctx); err == nil {
		owned, _ = m.Value("sundial_worker_assigned_partitions")
	}
	offset := "unknown"
	if m, err := pr.Metrics(ctx); err == nil {
		if v, ok := m.Value("sundial_worker_clock_offset_seconds"); ok {
			offset = FormatLatency(harness.Seconds(v))
		}
	}
	c.d.noteMisfires(ctx) // its skips count after it is gone
	if err := pr.Stop(c.r.opts.Window); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s owned %.0f partitions for 30 s, measured offset %s, then stopped gracefully", pr.Name, owned, offset), nil
}

// ChaosMarkdown renders a matrix as a table with its details.
func ChaosMarkdown(res Result) string {
	var b strings.Builder
	if res.Deployment != "" {
		fmt.Fprintf(&b, "Deployment: %s\n\n", res.Deployment)
	}
	fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(res.Header, " | "), strings.Repeat("---|", len(res.Header)))
	for _, row := range res.Rows {
		fmt.Fprintf(&b, "| %s |\n", strings.Join(slices.Clone(row), " | "))
	}
	b.WriteString("\n")
	for _, d := range res.Details {
		fmt.Fprintf(&b, "- %s\n", d)
	}
	for _, p := range res.Problems {
		fmt.Fprintf(&b, "- PROBLEM: %s\n", p)
	}
	return b.String()
}
