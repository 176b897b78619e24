package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Scenarios names every scenario in the order a full run takes them.
// failover is last: it kills processes of a shared deployment (--quick).
var Scenarios = []string{"steady", "herd", "max", "burst", "cancel", "registered", "priority", "failover"}

// Optional names the scenarios a run takes only when --scenarios names
// them: staging starts deployments of its own, several prefetchers each;
// tenants one with a quotas file for its workers; the overload and
// recovery scenarios (overload, worker-kill, cpu-hog, delete-staged,
// register-delete) put
// the platform behind on purpose and take minutes each.
var Optional = []string{"staging", "tenants", "overload", "worker-kill", "cpu-hog", "delete-staged", "register-delete"}

// Config selects and sizes the scenarios of a run.
type Config struct {
	Scenarios  []string
	Steady     SteadyConfig
	Herd       SteadyConfig // the herd: Steady's load without jitter
	Max        MaxConfig
	Burst      BurstConfig
	Cancel     CancelConfig
	Registered RegisteredConfig
	Failover   FailoverConfig
	Priority   PriorityConfig
	Staging    StagingConfig
	Tenants    TenantsConfig
	// The overload and recovery scenarios (recovery.go).
	Overload     OverloadConfig
	WorkerKill   WorkerKillConfig
	CPUHog       CPUHogConfig
	DeleteStaged DeleteStagedConfig
	// RegisterDelete is a herd registered, fired and deleted next to
	// jittered jobs (registerdelete.go).
	RegisterDelete RegisterDeleteConfig
	// Topology is the deployment of the scenarios that run on one of
	// their own (all but failover and staging): how many prefetchers,
	// relays and workers (their --ranges is Options.Deploy's). Zero counts
	// are one.
	Topology Topology
	// Shared runs every scenario on one deployment (two of each scaled
	// service) instead of one deployment per scenario: quicker, for the CI
	// smoke run, at the cost of scenarios sharing processes.
	Shared bool
}

// scenarioTopology is the deployment each scenario runs on when not shared:
// one process per service, except failover, which runs several of each
// (its prefetchers sharing ranges unless --failover-ranges is 0).
func scenarioTopology(name string, cfg Config, ranges int) topology {
	if name == "failover" {
		return topology{prefetchers: max(cfg.Failover.Prefetchers, 2), relays: 2, workers: 2, ranges: cfg.Failover.Ranges}
	}
	t := cfg.Topology
	top := topology{prefetchers: max(t.Prefetchers, 1), relays: max(t.Relays, 1), workers: max(t.Workers, 1), ranges: ranges}
	if name == "worker-kill" {
		// one of two workers is killed
		top.workers = max(top.workers, 2)
	}
	return top
}

// Topology sizes a deployment (see Config.Topology).
type Topology struct {
	Prefetchers, Relays, Workers int
}

// Run runs the configured scenarios in order and returns their results.
// A scenario that fails to run (as opposed to measuring badly) ends the run
// with an error; the results so far are returned with it.
func (r *Runner) Run(ctx context.Context, cfg Config) ([]Result, error) {
	var shared *deployment
	if cfg.Shared {
		d, err := r.deploy(ctx, "shared", topology{prefetchers: 2, relays: 2, workers: 2, ranges: cfg.Failover.Ranges})
		if err != nil {
			return nil, err
		}
		shared = d
		defer func() {
			if err := d.close(context.WithoutCancel(ctx), false); err != nil {
				r.log.Warn("deployment not cleaned up", "err", err)
			}
		}()
	}
	var results []Result
	for _, name := range cfg.Scenarios {
		started := r.clock.Now()
		r.log.Info("scenario starting", "scenario", name)
		res, err := r.runOne(ctx, name, cfg, shared)
		if err != nil {
			return results, fmt.Errorf("bench: scenario %s: %w", name, err)
		}
		res.detailf("%s: scenario took %s (deployment start and teardown included)", name, r.clock.Now().Sub(started).Round(time.Second))
		results = append(results, res)
		r.log.Info("scenario done", "scenario", name, "took", r.clock.Now().Sub(started).Round(time.Second))
	}
	return results, nil
}

func (r *Runner) runOne(ctx context.Context, name string, cfg Config, shared *deployment) (res Result, err error) {
	if name == "staging" {
		return r.Staging(ctx, cfg.Staging)
	}
	if name == "tenants" {
		return r.Tenants(ctx, cfg.Tenants)
	}
	d := shared
	if d == nil {
		if d, err = r.deploy(ctx, name, scenarioTopology(name, cfg, r.opts.Deploy.Ranges)); err != nil {
			return res, err
		}
		defer func() {
			keep := r.opts.KeepProblemNamespaces && len(res.Problems) > 0
			if cerr := d.close(context.WithoutCancel(ctx), keep); cerr != nil {
				r.log.Warn("deployment not cleaned up", "scenario", name, "err", cerr)
			}
		}()
	}
	// as started: a scenario may kill and replace processes
	deployment := d.describe()
	defer func() { res.Deployment = deployment }()
	switch name {
	case "steady":
		return r.Steady(ctx, d, cfg.Steady)
	case "herd":
		return r.Herd(ctx, d, cfg.Herd)
	case "max":
		return r.Max(ctx, d, cfg.Max)
	case "burst":
		return r.Burst(ctx, d, cfg.Burst)
	case "cancel":
		return r.Cancel(ctx, d, cfg.Cancel)
	case "registered":
		return r.Registered(ctx, d, cfg.Registered)
	case "failover":
		return r.Failover(ctx, d, cfg.Failover)
	case "priority":
		return r.Priority(ctx, d, cfg.Priority)
	case "overload":
		return r.Overload(ctx, d, cfg.Overload)
	case "worker-kill":
		return r.WorkerKill(ctx, d, cfg.WorkerKill)
	case "cpu-hog":
		return r.CPUHog(ctx, d, cfg.CPUHog)
	case "delete-staged":
		return r.DeleteStaged(ctx, d, cfg.DeleteStaged)
	case "register-delete":
		return r.RegisterDelete(ctx, d, cfg.RegisterDelete)
	}
	return res, errors.New("unknown scenario " + name)
}
