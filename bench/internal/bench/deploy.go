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

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// topology is how many processes of each service a deployment runs (apis:
// 0 is one).
type topology struct {
	apis, prefetchers, relays, workers int
	// ranges is the prefetchers' --ranges (0: one elected leader).
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
	client sundialv1.JobServiceClient
	pool   *pgxpool.Pool // the namespace's schema

	apis        []*harness.Process // the client talks to the last one started
	prefetchers []*harness.Process
	relays      []*harness.Process
	workers     []*harness.Process
}

// deploy starts a deployment: namespace, sink, api, relays (they create the
// topics), prefetchers, workers.
func (r *Runner) deploy(ctx context.Context, name string, topo topology) (d *deployment, err error) {
	d = &deployment{r: r, name: name}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.close(context.WithoutCancel(ctx)))
			d = nil
		}
	}()
	if d.ns, err = harness.NewNamespace(ctx, r.opts.Infra, "bench_"+name); err != nil {
		return d, err
	}
	if d.sink, err = harness.NewSink([]byte(r.secret), harness.SinkClock(r.clock)); err != nil {
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
		Secret:    r.secret,
		Pprof:     r.opts.ProfileDir != "",
		Env:       r.serviceEnv(strings.Join(append([]string{d.sink.Addr()}, topo.extraTargets...), ",")),
	}
	if d.plat, err = harness.NewPlatform(d.pcfg); err != nil {
		return d, err
	}
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
		pr, err := d.plat.Start(ctx, "prefetcher-"+strconv.Itoa(i+1), "prefetcher", "--node-id", id, "--window", r.opts.Window.String(), "--ranges", strconv.Itoa(topo.ranges))
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

// close stops everything the deployment started and drops its namespace.
func (d *deployment) close(ctx context.Context) error {
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
	if d.ns != nil {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if err := d.ns.Drop(dctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
