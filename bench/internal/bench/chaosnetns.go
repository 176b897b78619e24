package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sundialhq/sundial/bench/internal/netns"
	"github.com/sundialhq/sundial/testkit/harness"
)

// The rows that cut one worker off from one component run that worker in
// a network namespace of its own (package netns): inside it, forwarders
// listen on 127.0.0.1 at each component's port and at the targets', and
// pass every connection to the host, so the worker is configured as every
// other one. Cutting the Redis (or Kafka) forwarders closes that worker's
// connections and refuses new ones, while the component stays up for the
// rest of the deployment: a partition of one worker, not an outage.

// netnsRows are the faults that need a network namespace (root and ip(8)).
var netnsRows = []string{"worker-cut-redis", "worker-cut-kafka", "worker-drop-redis", "worker-drop-kafka"}

// partition is how a worker is cut off from a component.
type partition int

const (
	// cut closes its connections and refuses new ones: the worker learns
	// of it at once.
	cut partition = iota
	// stall drops every packet: connections stay open and new ones hang,
	// and the worker learns of it only from its own timeouts.
	stall
)

// isolated is a worker in a network namespace of its own and the
// forwarders that connect it.
type isolated struct {
	ns     *netns.Namespace
	into   map[string][]*netns.Forwarder // component → its forwarders into the namespace
	plat   *harness.Platform             // starts the worker through the wrapper in binDir
	worker *harness.Process

	announce *os.File // the FIFO the wrapper writes the worker's admin address to
	wg       sync.WaitGroup

	mu  sync.Mutex
	out []*netns.Forwarder // admin ports, host → namespace

	// watched are the workers running when the cut began, and before their
	// lateness histograms then.
	watched []*harness.Process
	before  []harness.Histogram
}

// netnsName is the namespace's name: fixed per components instance (its
// Redis port), so a run on this instance removes what a killed run left,
// and runs on two instances do not collide.
func (c *chaos) netnsName() string {
	_, port, _ := net.SplitHostPort(c.r.opts.Infra.RedisAddr)
	return "sundial-chaos-" + port
}

// netnsPreflight fails the matrix at once when a selected row needs a
// namespace this process cannot make, rather than after the rows before it
// (or by skipping the row), and removes a namespace left by a killed run.
func (c *chaos) netnsPreflight(ctx context.Context) error {
	var need []string
	for _, row := range c.cfg.Rows {
		if slices.Contains(netnsRows, row) {
			need = append(need, row)
		}
	}
	if len(need) == 0 {
		return nil
	}
	if err := netns.Available(); err != nil {
		return fmt.Errorf("chaos: %s cannot run: %w", strings.Join(need, ", "), err)
	}
	return (&netns.Namespace{Name: c.netnsName()}).Delete(ctx)
}

// componentAddrs are the host addresses the worker dials, by component:
// each gets a forwarder inside the namespace.
func (c *chaos) componentAddrs() (map[string][]string, error) {
	in := c.r.opts.Infra
	u, err := url.Parse(in.PostgresDSN)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("chaos: no host in the Postgres DSN %q", in.PostgresDSN)
	}
	withPort := func(addrs []string, port string) []string {
		var out []string
		for _, a := range addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				a = net.JoinHostPort(a, port)
			}
			out = append(out, a)
		}
		return out
	}
	return map[string][]string{
		"postgres":  withPort([]string{u.Host}, "5432"),
		"redis":     {in.RedisAddr},
		"kafka":     withPort(in.KafkaBrokers, "9092"),
		"cassandra": withPort(in.CassandraHosts, "9042"),
		"targets":   {c.d.sink.Addr(), c.hung.Addr()},
	}, nil
}

// startIsolated starts one more worker, in a network namespace of its
// own, and waits until it owns partitions.
func (c *chaos) startIsolated(ctx context.Context) (err error) {
	if c.iso != nil {
		return errors.New("chaos: an isolated worker is already running")
	}
	addrs, err := c.componentAddrs()
	if err != nil {
		return err
	}
	ns, err := netns.Create(ctx, c.netnsName())
	if err != nil {
		return err
	}
	iso := &isolated{ns: ns, into: map[string][]*netns.Forwarder{}}
	c.iso = iso
	defer func() {
		if err != nil {
			err = errors.Join(err, c.stopIsolated(context.WithoutCancel(ctx)))
		}
	}()
	for comp, list := range addrs {
		for _, a := range list {
			f := ns.Into(a)
			iso.into[comp] = append(iso.into[comp], f)
			if err := f.Start(); err != nil {
				return fmt.Errorf("chaos: forward %s (%s) into %s: %w", comp, a, ns.Name, err)
			}
		}
	}
	binDir := filepath.Join(c.r.opts.WorkDir, "netns-bin")
	if err := iso.wrapper(binDir, filepath.Join(c.r.opts.BinDir, harness.Binary("worker"))); err != nil {
		return err
	}
	pcfg := c.d.pcfg
	pcfg.BinDir = binDir
	if iso.plat, err = harness.NewPlatform(pcfg); err != nil {
		return err
	}
	c.spawned++
	name := fmt.Sprintf("worker-ns%d", c.spawned)
	if iso.worker, err = iso.plat.Start(ctx, name, "worker", c.workerArgs(name)...); err != nil {
		return err
	}
	c.d.workers = append(c.d.workers, iso.worker)
	return c.awaitOwns(ctx, iso.worker, 60*time.Second)
}

// wrapper writes binDir/sundial-worker: a script that announces the
// worker's admin address and execs the real worker inside the namespace.
// The platform picks that address and polls /readyz there, on the host;
// the announcement is how the bench learns it and opens the admin port's
// forwarder out of the namespace before the first poll can succeed.
func (iso *isolated) wrapper(binDir, worker string) error {
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	fifo := filepath.Join(binDir, "admin-addrs")
	_ = os.Remove(fifo)
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		return fmt.Errorf("chaos: mkfifo %s: %w", fifo, err)
	}
	// Read and write, so opening it never blocks and the script's write
	// never waits for a reader.
	f, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	iso.announce = f
	iso.wg.Add(1)
	go iso.serveAdmin(f) // owned by iso: ends when stopIsolated closes f
	argv := iso.ns.Command(worker)
	for i, a := range argv {
		argv[i] = shellQuote(a)
	}
	script := fmt.Sprintf("#!/bin/sh\n# sundial-bench chaos: the worker in network namespace %s.\nprintf '%%s\\n' \"$SUNDIAL_ADMIN_ADDR\" >%s\nexec %s \"$@\"\n",
		iso.ns.Name, shellQuote(fifo), strings.Join(argv, " "))
	return os.WriteFile(filepath.Join(binDir, harness.Binary("worker")), []byte(script), 0o755)
}

// serveAdmin opens a forwarder out of the namespace for each admin
// address announced.
func (iso *isolated) serveAdmin(f *os.File) {
	defer iso.wg.Done()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		addr := strings.TrimSpace(sc.Text())
		if addr == "" {
			continue
		}
		fw := iso.ns.OutOf(addr)
		if err := fw.Start(); err != nil {
			continue // the platform's readiness wait reports the worker unreachable
		}
		iso.mu.Lock()
		iso.out = append(iso.out, fw)
		iso.mu.Unlock()
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// stopIsolated stops the isolated worker gracefully, closes the
// forwarders and deletes the namespace. It is safe to call when none runs,
// and on every exit path of the matrix.
func (c *chaos) stopIsolated(ctx context.Context) error {
	iso := c.iso
	if iso == nil {
		return nil
	}
	c.iso = nil
	var errs []error
	if iso.worker != nil {
		// Its skips so far count after it is gone.
		c.d.noteMisfires(ctx)
		errs = append(errs, iso.worker.Stop(c.r.opts.Window))
	}
	if iso.plat != nil {
		errs = append(errs, iso.plat.Stop())
	}
	if iso.announce != nil {
		_ = iso.announce.Close()
	}
	iso.wg.Wait()
	iso.mu.Lock()
	fws := iso.out
	iso.mu.Unlock()
	for _, list := range iso.into {
		fws = append(fws, list...)
	}
	for _, f := range fws {
		f.Close()
	}
	errs = append(errs, iso.ns.Delete(ctx))
	return errors.Join(errs...)
}

// awaitOwns waits until w owns a partition and the workers own every
// partition between them.
func (c *chaos) awaitOwns(ctx context.Context, w *harness.Process, limit time.Duration) error {
	deadline := c.r.clock.Now().Add(limit)
	for {
		if assigned(ctx, w) > 0 {
			if err := c.d.awaitGroup(ctx, 1); err != nil {
				return err
			}
			return nil
		}
		if c.r.clock.Now().After(deadline) {
			return fmt.Errorf("chaos: %s owns no partition after %s\n%s", w.Name, limit, harness.Tail(w.LogPath, 20))
		}
		if err := Sleep(ctx, c.r.clock, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// assigned is how many partitions w says it owns (0 when it cannot say).
func assigned(ctx context.Context, w *harness.Process) float64 {
	m, err := w.Metrics(ctx)
	if err != nil {
		return 0
	}
	v, _ := m.Value("sundial_worker_assigned_partitions")
	return v
}

// isolate cuts the isolated worker off from component for the outage, the
// way how says, then lets it back and waits until the workers own every
// partition again.
func (c *chaos) isolate(ctx context.Context, component string, how partition) (string, error) {
	iso := c.iso
	if iso == nil {
		return "", errors.New("chaos: no isolated worker")
	}
	w := iso.worker
	var others []*harness.Process
	for _, o := range c.d.workers {
		if o != w && o.Alive() {
			others = append(others, o)
		}
	}
	owned := assigned(ctx, w)
	iso.watched = append(others, w)
	iso.before = nil
	for _, o := range iso.watched {
		iso.before = append(iso.before, fireLateness(ctx, o))
	}
	severed := 0
	for _, f := range iso.into[component] {
		if how == stall {
			severed += f.Stall()
		} else {
			severed += f.Cut()
		}
	}
	began := c.r.clock.Now()
	// Whether the others took the worker's partitions over, sampled just
	// before the cut ends.
	if err := Sleep(ctx, c.r.clock, c.cfg.Outage-500*time.Millisecond); err != nil {
		return "", err
	}
	othersOwned := 0.0
	for _, o := range others {
		othersOwned += assigned(ctx, o)
	}
	if err := sleepUntil(ctx, c.r.clock, began.Add(c.cfg.Outage)); err != nil {
		return "", err
	}
	for _, f := range iso.into[component] {
		if err := f.Resume(); err != nil {
			return "", fmt.Errorf("chaos: resume %s into %s: %w", component, iso.ns.Name, err)
		}
	}
	back := c.r.clock.Now()
	// A worker that exits here, cut off or not, is a finding of its own,
	// not a fault this row applied.
	for _, o := range iso.watched {
		if !o.Alive() {
			return "", fmt.Errorf("chaos: %s exited during the cut: %v\n%s", o.Name, o.ExitErr(), harness.Tail(o.LogPath, 20))
		}
	}
	total := float64(4 * c.r.topicPartitions)
	rejoin := "did not own a partition again within 60 s"
	if err := c.awaitOwns(ctx, w, 60*time.Second); err == nil {
		rejoin = fmt.Sprintf("it owned %.0f again %s after", assigned(ctx, w), FormatLatency(c.r.clock.Now().Sub(back)))
	} else if ctx.Err() != nil {
		return "", ctx.Err()
	}
	what := "closed, new ones refused"
	if how == stall {
		what = "stalled (open, no byte passing), new ones hanging"
	}
	return fmt.Sprintf("%s (a third worker, netns %s) owned %.0f of %.0f partitions; its %d %s connections %s for %s; at the cut's end the other workers owned %.0f; %s",
		w.Name, iso.ns.Name, owned, total, severed, component, what, back.Sub(began).Round(100*time.Millisecond), othersOwned, rejoin), nil
}

// leaveIsolated ends a cut row: it says which worker fired how many
// firings from the cut to the row's end, and how many of them late, by the
// workers' own lateness histograms (the sink cannot tell which worker a
// delivery came from), then stops the isolated worker.
func (c *chaos) leaveIsolated(ctx context.Context) (string, error) {
	var fired []string
	if iso := c.iso; iso != nil {
		for i, o := range iso.watched {
			now := fireLateness(ctx, o)
			if len(now.Bounds) == 0 || now.Count < iso.before[i].Count {
				fired = append(fired, o.Name+" unknown")
				continue
			}
			h := now.Sub(iso.before[i])
			fired = append(fired, fmt.Sprintf("%s %d (%d over 1 s late)", o.Name, h.Count, overOneSecond(h)))
		}
	}
	note := ""
	if len(fired) > 0 {
		note = "fired from the cut to the row's end, by the workers' lateness histograms: " + strings.Join(fired, ", ")
	}
	return note, c.stopIsolated(ctx)
}

// fireLateness is w's histogram of lateness at the target (the zero
// Histogram when it cannot say).
func fireLateness(ctx context.Context, w *harness.Process) harness.Histogram {
	m, err := w.Metrics(ctx)
	if err != nil {
		return harness.Histogram{}
	}
	h, _ := m.Histogram("sundial_worker_fire_lateness_seconds", "stage", "target")
	return h
}

// overOneSecond counts h's observations above one second (a bound of the
// worker's lateness buckets).
func overOneSecond(h harness.Histogram) uint64 {
	for i, b := range h.Bounds {
		if b == 1 {
			return h.Count - h.Counts[i]
		}
	}
	return 0
}

// prepareLead is the worker's default --prepare-lead: how far ahead of its
// instant a firing is leased, so those due that soon after a Redis cut
// were leased before it.
const prepareLead = 1500 * time.Millisecond

// cutPhase is a stretch of an outage row, by fire instant.
type cutPhase struct {
	what     string
	from, to time.Time
}

// outagePhases splits a row that takes Redis or Kafka away (from one
// worker or from all) by what the design says of each stretch: firings due
// within --prepare-lead of the outage's start were leased before it; the
// rest of the outage; after it. A cut ends after --outage; a stopped
// component when it answers again (row.over).
func (c *chaos) outagePhases(row chaosRow) []cutPhase {
	word, end := "cut", row.start.Add(c.cfg.Outage)
	if !slices.Contains(netnsRows, row.f.name) {
		word, end = "outage", row.over
	}
	leased := row.start.Add(prepareLead)
	return []cutPhase{
		{fmt.Sprintf("in the %s's first %s (leased before it)", word, FormatLatency(prepareLead)), row.start, leased},
		{"in the rest of the " + word, leased, end},
		{"after the " + word, end, row.ended},
	}
}
