package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// DefaultRanges is the prefetchers' --ranges that make run deploys (the
// prefetcher's own default).
const DefaultRanges = 16

// Deploy is how a run's deployments are configured beyond their size.
// DefaultDeploy is what `make run` deploys; every field is a deliberate
// departure from it that the tables then name.
type Deploy struct {
	// Ranges is the prefetchers' --ranges of the deployments that do not
	// size their own (1: one leader stages every partition).
	Ranges int
	// Plaintext serves the api without TLS; make run serves TLS with
	// certificates `sundial-api dev-tls` signs with the development CA,
	// which the harness makes the same way.
	Plaintext bool
	// APILimits keeps make run's api rate limit (200 calls/s per token)
	// and tenant quotas (6,000 creations a minute, 100,000 jobs) while the
	// scenarios register. Without it they are lifted: every scenario
	// registers thousands of jobs a minute through CreateJob, which those
	// limits would refuse; nothing the workers do passes through them.
	APILimits bool
	// Durable says how Postgres commits during the run, for the tables.
	Durable string
	// RedisCluster, when set, is the comma-separated nodes of a Redis
	// Cluster (deploy/local/cluster/redis.sh) the api and workers use
	// instead of the single Redis; the cluster's nodes are then measured as
	// "redis".
	RedisCluster string
	// Clustered names the other components the deployment reaches in the
	// cluster profile's clustered mode (zookeeper, postgres, kafka, cassandra: the
	// Options' Infra then holds their addresses). Their nodes are not
	// measured: a row's CPU leaves them out.
	Clustered []string
}

// DefaultDeploy is make run's deployment.
func DefaultDeploy() Deploy { return Deploy{Ranges: DefaultRanges} }

// topology is how many processes of each service a deployment runs (apis:
// 0 is one).
type topology struct {
	apis, prefetchers, relays, workers int
	// ranges is the prefetchers' --ranges (1: one leader).
	ranges int
	// extraTargets are more target addresses the workers may reach besides
	// the sink (the chaos matrix's hanging target).
	extraTargets []string
	// workerArgs are more flags of every worker (the tenants scenario's
	// quotas file).
	workerArgs []string
}

// deployment is one Sundial deployment in a namespace of its own, with the
// sink its jobs fire.
type deployment struct {
	r      *Runner
	name   string
	ns     *harness.Namespace
	plat   *harness.Platform
	pcfg   harness.Config // plat's, for another platform of the same deployment
	sink   *harness.Sink
	topo   topology
	client sundialv1.JobServiceClient
	pool   *pgxpool.Pool // the namespace's schema

	apis        []*harness.Process // the client talks to the last one started
	prefetchers []*harness.Process
	relays      []*harness.Process
	workers     []*harness.Process

	// misfires is the last misfire_skipped count read from each worker.
	misfires misfires
}

// deploy starts a deployment: namespace, sink, api, relays (they create the
// topics), prefetchers, workers.
func (r *Runner) deploy(ctx context.Context, name string, topo topology) (d *deployment, err error) {
	d = &deployment{r: r, name: name}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.close(context.WithoutCancel(ctx), false))
			d = nil
		}
	}()
	if d.ns, err = harness.NewNamespace(ctx, r.opts.Infra, "bench_"+name); err != nil {
		return d, err
	}
	keys, err := d.ns.SigningKeys()
	if err != nil {
		return d, err
	}
	if d.sink, err = harness.NewSink(keys, harness.SinkClock(r.clock)); err != nil {
		return d, err
	}
	d.pcfg = harness.Config{
		BinDir:    r.opts.BinDir,
		Infra:     r.opts.Infra,
		Namespace: d.ns,
		LogDir:    filepath.Join(r.opts.WorkDir, "logs", d.ns.Name),
		Logger:    r.log,
		Token:     "bench-token",
		Tenant:    "bench",
		Pprof:     r.opts.ProfileDir != "",
		Env:       r.serviceEnv(strings.Join(append([]string{d.sink.Addr()}, topo.extraTargets...), ",")),
		TLS:       harness.TLS,
	}
	if r.opts.Deploy.Plaintext {
		d.pcfg.TLS = harness.Plaintext
	}
	if d.plat, err = harness.NewPlatform(d.pcfg); err != nil {
		return d, err
	}
	d.topo = topo
	r.log.Info("starting deployment", "name", name, "namespace", d.ns.Name, "logs", filepath.Join(r.opts.WorkDir, "logs", d.ns.Name))
	for i := range max(topo.apis, 1) {
		name := "api"
		if i > 0 {
			name += "-" + strconv.Itoa(i+1)
		}
		pr, err := d.plat.StartAPI(ctx, name)
		if err != nil {
			return d, err
		}
		d.apis = append(d.apis, pr)
	}
	for i := range topo.relays {
		pr, err := d.plat.Start(ctx, "relay-"+strconv.Itoa(i+1), "relay", "--node-id", "relay-"+strconv.Itoa(i+1))
		if err != nil {
			return d, err
		}
		d.relays = append(d.relays, pr)
	}
	for i := range topo.prefetchers {
		id := "pf-" + strconv.Itoa(i+1)
		args := append([]string{"--node-id", id, "--window", r.opts.Window.String(), "--ranges", strconv.Itoa(topo.ranges)}, r.opts.PrefetcherArgs...)
		pr, err := d.plat.Start(ctx, "prefetcher-"+strconv.Itoa(i+1), "prefetcher", args...)
		if err != nil {
			return d, err
		}
		d.prefetchers = append(d.prefetchers, pr)
	}
	for i := range topo.workers {
		id := "w" + strconv.Itoa(i+1)
		args := append([]string{"--worker-id", id, "--executors", strconv.Itoa(r.opts.Executors)}, r.opts.WorkerArgs...)
		args = append(args, topo.workerArgs...)
		pr, err := d.plat.Start(ctx, "worker-"+strconv.Itoa(i+1), "worker", args...)
		if err != nil {
			return d, err
		}
		d.workers = append(d.workers, pr)
	}
	if d.client, err = d.plat.Client(); err != nil {
		return d, err
	}
	if d.pool, err = pgxpool.New(ctx, d.ns.PostgresDSN); err != nil {
		return d, err
	}
	if err := d.awaitGroup(ctx, topo.workers); err != nil {
		return d, err
	}
	return d, nil
}

// awaitGroup waits until the workers own every partition between them, so
// no measurement starts during the group's first rebalance.
func (d *deployment) awaitGroup(ctx context.Context, workers int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		total := 0.0
		for _, w := range d.workers {
			if m, err := w.Metrics(ctx); err == nil {
				v, _ := m.Value("sundial_worker_assigned_partitions")
				total += v
			}
		}
		// four priority topics with the relay's partition count each
		if total >= float64(4*d.r.topicPartitions) || workers == 0 {
			return nil
		}
		if err := Sleep(ctx, d.r.clock, 250*time.Millisecond); err != nil {
			return fmt.Errorf("bench: workers own %v partitions after 60s: %w", total, err)
		}
	}
}

// describe names the deployment's flags for a table: how many of each
// service, the prefetchers' ranges, TLS, the workers' limits, the api's
// limits and how Postgres commits.
func (d *deployment) describe() string {
	o := d.r.opts
	tls := "TLS api (development CA)"
	if o.Deploy.Plaintext {
		tls = "plaintext api"
	}
	ranges := fmt.Sprintf("--ranges %d", d.topo.ranges)
	if d.topo.ranges == 1 {
		ranges = "--ranges 1 (one leader)"
	}
	workerArgs := append(append([]string(nil), o.WorkerArgs...), d.topo.workerArgs...)
	limits := "breakers and cluster limits on"
	switch {
	case flagValue(workerArgs, "breaker-failures") == "0" && flagValue(workerArgs, "cluster-limits") == "false":
		limits = "breakers off, limits per worker"
	case flagValue(workerArgs, "breaker-failures") == "0":
		limits = "breakers off, cluster limits on"
	case flagValue(workerArgs, "cluster-limits") == "false":
		limits = "breakers on, limits per worker"
	}
	api := "api rate limit and quotas lifted for registration"
	if o.Deploy.APILimits {
		api = "api rate limit and quotas as make run's"
	}
	s := fmt.Sprintf("%d api, %d prefetcher (%s), %d relay, %d worker (%d executors; %s); %s; %s",
		max(len(d.apis), 1), len(d.prefetchers), ranges, len(d.relays), len(d.workers), o.Executors, limits, tls, api)
	if len(d.prefetchers) == 0 {
		// A scenario that starts its prefetchers itself (staging) names them.
		s = fmt.Sprintf("%d api, %d relay, %d worker (%d executors; %s); %s; %s; prefetchers per row",
			max(len(d.apis), 1), len(d.relays), len(d.workers), o.Executors, limits, tls, api)
	}
	if o.Deploy.Durable != "" {
		s += "; " + o.Deploy.Durable
	}
	for _, c := range o.Deploy.Clustered {
		s += "; " + clusteredName[c]
	}
	if o.Deploy.RedisCluster != "" {
		s += fmt.Sprintf("; a Redis Cluster of %d nodes", len(strings.Split(o.Deploy.RedisCluster, ",")))
	}
	if len(workerArgs) > 0 {
		s += "; workers also run with `" + strings.Join(workerArgs, " ") + "`"
	}
	if len(o.PrefetcherArgs) > 0 && len(d.prefetchers) > 0 {
		s += "; prefetchers also run with `" + strings.Join(o.PrefetcherArgs, " ") + "`"
	}
	return s
}

// flagValue is the value of --name in args ("--name=v" or "--name v"; a
// bare boolean flag is "true"), or "" when absent. The last one wins, as
// with the flag package.
func flagValue(args []string, name string) string {
	v := ""
	for i, a := range args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		switch {
		case a == name && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-"):
			v = args[i+1]
		case a == name:
			v = "true"
		case strings.HasPrefix(a, name+"="):
			v = strings.TrimPrefix(a, name+"=")
		}
	}
	return v
}

// victimPartitions is the partitions of topic the group member with
// clientID owns now, from the broker's view of the group.
func (d *deployment) victimPartitions(ctx context.Context, clientID, topic string) (map[int32]bool, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.r.opts.Infra.KafkaBrokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	groups, err := kadm.NewClient(cl).DescribeGroups(ctx, d.ns.Group)
	if err != nil {
		return nil, err
	}
	g, ok := groups[d.ns.Group]
	if !ok || g.Err != nil {
		return nil, fmt.Errorf("bench: describe group %s: %v", d.ns.Group, g.Err)
	}
	out := map[int32]bool{}
	for _, m := range g.Members {
		if m.ClientID != clientID {
			continue
		}
		a, ok := m.Assigned.AsConsumer()
		if !ok {
			continue
		}
		for _, t := range a.Topics {
			if t.Topic == topic {
				for _, p := range t.Partitions {
					out[p] = true
				}
			}
		}
	}
	return out, nil
}

// jobPartition is the partition of a topic of n partitions that the relay
// publishes a job's firings to: its records are keyed by the job id and
// partitioned by Kafka's murmur2 hash (kgo.StickyKeyPartitioner).
func jobPartition(jobID string, n int) int32 {
	p := kgo.StickyKeyPartitioner(nil).ForTopic("")
	return int32(p.Partition(&kgo.Record{Key: []byte(jobID)}, n))
}

// services lists the deployment's service processes still running.
func (d *deployment) services() []*harness.Process {
	var out []*harness.Process
	for _, pr := range d.plat.Processes() {
		if pr.Alive() {
			out = append(out, pr)
		}
	}
	return out
}

// close stops everything the deployment started and drops its namespace,
// unless keep (it is named in the log instead).
func (d *deployment) close(ctx context.Context, keep bool) error {
	var errs []error
	if d.pool != nil {
		d.pool.Close()
	}
	if d.plat != nil {
		if err := d.plat.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if d.sink != nil {
		if err := d.sink.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if d.ns != nil && keep {
		d.r.log.Warn("namespace left behind to inspect (--keep-problem-namespaces)", "postgres_schema", d.ns.Schema, "cassandra_keyspace", d.ns.Keyspace,
			"topic_prefix", d.ns.TopicPrefix, "group", d.ns.Group, "redis_prefix", d.ns.RedisPrefix)
	} else if d.ns != nil {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if err := d.ns.Drop(dctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
