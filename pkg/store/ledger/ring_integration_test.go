//go:build integration && cassandracluster

// The ledger against the cluster profile's 3-node Cassandra ring
// (deploy/local/cluster/cassandra.sh), in a keyspace of replication factor
// 3. Its own build tag keeps it out of the integration tier that make test
// runs (which does not start the ring: three Cassandra JVMs); run it with
//
//	deploy/local/cluster/cassandra.sh up
//	source <(deploy/local/cluster/cassandra.sh env)
//	go test -tags integration,cassandracluster -count=1 -run TestCassandraRing ./pkg/store/ledger/
//
// Without the ring it fails, never skips.

package ledger_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// envCassandraRingHosts is what `cassandra.sh env` exports; the default is
// the script's addresses.
const (
	envCassandraRingHosts     = "SUNDIAL_TEST_CASSANDRA_RING_HOSTS"
	defaultCassandraRingHosts = "127.0.0.2:9142,127.0.0.3:9142,127.0.0.4:9142"
	ringReplication           = "{'class': 'SimpleStrategy', 'replication_factor': 3}"
)

// ringHosts are the ring's three CQL addresses, each checked to accept
// connections: the test kills one and needs all three at its start.
func ringHosts(t *testing.T) []string {
	t.Helper()
	v := os.Getenv(envCassandraRingHosts)
	if v == "" {
		v = defaultCassandraRingHosts
	}
	hosts := strings.Split(v, ",")
	for _, h := range hosts {
		c, err := net.DialTimeout("tcp", h, 2*time.Second)
		if err != nil {
			t.Fatalf("the Cassandra ring's node %s is not reachable (%v).\n"+
				"Start the ring with `deploy/local/cluster/cassandra.sh up` (or CLUSTER=cassandra make infra-up) and check it "+
				"with `deploy/local/cluster/cassandra.sh status`; if it runs elsewhere, set %s (source <(deploy/local/cluster/cassandra.sh env)).",
				h, err, envCassandraRingHosts)
		}
		_ = c.Close()
	}
	return hosts
}

// countingSession counts the statements that failed on their way to the
// ring, under the Retrying decorator: the attempts a lost node cost that
// the caller never saw.
type countingSession struct {
	ledger.Session
	failed atomic.Int64
}

func (c *countingSession) Exec(ctx context.Context, st ledger.Statement) error {
	err := c.Session.Exec(ctx, st)
	if err != nil {
		c.failed.Add(1)
	}
	return err
}

func (c *countingSession) ExecBatch(ctx context.Context, b ledger.Batch) error {
	err := c.Session.ExecBatch(ctx, b)
	if err != nil {
		c.failed.Add(1)
	}
	return err
}

// TestCassandraRingLocalQuorumSurvivesNodeKill writes records with the
// worker's composition of the ledger (Connect at its default LOCAL_QUORUM,
// Retrying with DefaultRetryPolicy, the real Writer) into an RF 3 keyspace,
// SIGKILLs a node, and goes on: every write is acknowledged (calls sent to
// the killed node's connections in the moments after its death may fail,
// and the record succeeds written again, as the worker's replay from
// ledger_pending does) and every read
// (GetExecution, ListByJob, ListByTenant) finds every record, with two of
// three replicas. Then the node is started again and the ring is whole,
// every record still found. It logs each phase's write latency.
func TestCassandraRingLocalQuorumSurvivesNodeKill(t *testing.T) {
	hosts := ringHosts(t)
	const killed = "1" // the seed, and the first contact point the driver was given
	raw, err := ledger.Connect(ledger.ConnectConfig{Hosts: hosts, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	ks := testinfra.UniqueName(t, 48)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := raw.Exec(ctx, ledger.Statement{CQL: "DROP KEYSPACE IF EXISTS " + ks}); err != nil {
			t.Logf("keyspace %s left behind: %v", ks, err)
		}
	})
	// Whatever happens below, the killed node is started again (and the
	// test fails if it cannot be); this cleanup runs before the drop.
	t.Cleanup(func() {
		if _, err := testinfra.RunClusterScript("cassandra", "start", killed); err != nil {
			t.Errorf("heal the Cassandra ring: %v", err)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := ledger.Migrate(ctx, raw, ks, ringReplication); err != nil {
		t.Fatal(err)
	}
	if rf := replicationFactor(ctx, t, raw, ks); rf != "3" {
		t.Fatalf("keyspace %s has replication_factor %q, want 3", ks, rf)
	}

	counting := &countingSession{Session: raw}
	s := ledger.Retrying(counting, ledger.DefaultRetryPolicy)
	w, r := ledger.NewWriter(s, ks), ledger.NewReader(s, ks)
	job := uuid.New()
	tenant := "ring-" + uuid.NewString()[:8]
	base := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	var written []*sundialv1.ExecutionAttempt
	// A Record call sent to the killed node's connections before the
	// driver notices it is gone may fail (connection reset, broken pipe):
	// the worker then spills the record to ledger_pending and writes it
	// again later. Such failures are allowed only within killGrace of the
	// kill, and the same record written again must then succeed; every
	// other Record call must succeed the first time.
	const killGrace = 10 * time.Second
	var killedAt time.Time
	var failedAtKill []string
	// write records n more slots of job (one a second from base, each
	// RUNNING then SUCCEEDED, as a worker records an attempt) and returns
	// each Record call's latency.
	write := func(phase string, n int) []time.Duration {
		var lat []time.Duration
		for i := 0; i < n; i++ {
			sched := base.Add(time.Duration(len(written)) * time.Second)
			for _, st := range []sundialv1.ExecutionStatus{running, succeeded} {
				a := attempt(job, sched, 1, 7, st)
				a.Tenant = tenant
				start := time.Now()
				err := w.Record(ctx, a)
				// As the replay from ledger_pending: the same record again
				// a little later, until killGrace after the kill.
				for err != nil && !killedAt.IsZero() && time.Since(killedAt) < killGrace {
					failedAtKill = append(failedAtKill, fmt.Sprintf("%v after the kill: %v", time.Since(killedAt).Round(time.Millisecond), err))
					time.Sleep(100 * time.Millisecond)
					err = w.Record(ctx, a)
				}
				if err != nil {
					t.Fatalf("%s: record %d (%v): %v", phase, len(written), st, err)
				}
				lat = append(lat, time.Since(start))
			}
			a := attempt(job, sched, 1, 7, succeeded)
			a.Tenant = tenant
			written = append(written, a)
		}
		return lat
	}
	// readAll finds every record written so far through each read path.
	readAll := func(phase string) time.Duration {
		start := time.Now()
		for i, a := range written {
			got, err := r.GetExecution(ctx, a.ExecutionId)
			if err != nil {
				t.Fatalf("%s: GetExecution of record %d: %v", phase, i, err)
			}
			if len(got) != 1 || got[0].Status != succeeded {
				t.Fatalf("%s: GetExecution of record %d: %v, want one SUCCEEDED attempt", phase, i, got)
			}
		}
		seen := map[string]bool{}
		token := ""
		for {
			page, next, err := r.ListByJob(ctx, job.String(), 100, token)
			if err != nil {
				t.Fatalf("%s: ListByJob: %v", phase, err)
			}
			for _, a := range page {
				seen[a.ExecutionId] = true
			}
			if next == "" {
				break
			}
			token = next
		}
		byTenant := map[string]bool{}
		q := ledger.TenantQuery{Tenant: tenant, From: base, To: base.Add(2 * time.Hour), PageSize: 100}
		for {
			page, next, err := r.ListByTenant(ctx, q)
			if err != nil {
				t.Fatalf("%s: ListByTenant: %v", phase, err)
			}
			for _, a := range page {
				byTenant[a.ExecutionId] = true
			}
			if next == "" {
				break
			}
			q.PageToken = next
		}
		for i, a := range written {
			if !seen[a.ExecutionId] {
				t.Fatalf("%s: ListByJob is missing record %d (%s); it listed %d of %d", phase, i, a.ExecutionId, len(seen), len(written))
			}
			if !byTenant[a.ExecutionId] {
				t.Fatalf("%s: ListByTenant is missing record %d (%s); it listed %d of %d", phase, i, a.ExecutionId, len(byTenant), len(written))
			}
		}
		return time.Since(start)
	}

	const perPhase = 150
	healthy := write("healthy ring", perPhase)
	readHealthy := readAll("healthy ring")
	failedBefore := counting.failed.Load()

	killedAt = time.Now()
	testinfra.ClusterScript(t, "cassandra", "kill", killed)
	down := write("node "+killed+" killed", perPhase)
	readDown := readAll("node " + killed + " killed")
	failedDown := counting.failed.Load() - failedBefore
	outage := time.Since(killedAt)

	startedAt := time.Now()
	testinfra.ClusterScript(t, "cassandra", "start", killed)
	rejoined := time.Since(startedAt)
	failedBefore = counting.failed.Load()
	healed := write("node "+killed+" back", perPhase)
	readHealed := readAll("node " + killed + " back")
	failedHealed := counting.failed.Load() - failedBefore

	t.Logf("RF 3, LOCAL_QUORUM, %d Record calls a phase (RUNNING and SUCCEEDED of %d slots)", 2*perPhase, perPhase)
	t.Logf("healthy:        write %s; reading all %d back %v", latencies(healthy), perPhase, readHealthy.Round(time.Millisecond))
	t.Logf("node %s killed: write %s; reading all %d back %v; %d statements failed at the driver; phase lasted %v",
		killed, latencies(down), 2*perPhase, readDown.Round(time.Millisecond), failedDown, outage.Round(time.Millisecond))
	t.Logf("node %s back:   write %s; reading all %d back %v; %d statements failed at the driver; `cassandra.sh start %s` took %v",
		killed, latencies(healed), 3*perPhase, readHealed.Round(time.Millisecond), failedHealed, killed, rejoined.Round(time.Millisecond))
	t.Logf("%d Record calls failed after the kill before one succeeded written again: %v", len(failedAtKill), failedAtKill)
}

// replicationFactor is keyspace ks's replication_factor as the schema says.
func replicationFactor(ctx context.Context, t *testing.T, s ledger.Session, ks string) string {
	t.Helper()
	it := s.Iter(ctx, ledger.Statement{CQL: "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?", Values: []any{ks}})
	var repl map[string]string
	found := it.Scan(&repl)
	if err := it.Close(); err != nil {
		t.Fatalf("read keyspace %s's replication: %v", ks, err)
	}
	if !found {
		t.Fatalf("keyspace %s is not in system_schema.keyspaces", ks)
	}
	return repl["replication_factor"]
}

// latencies is "p50 … p99 … max …" of ds.
func latencies(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[int(q*float64(len(s)-1))].Round(10 * time.Microsecond) }
	return fmt.Sprintf("p50 %v p99 %v max %v", at(0.5), at(0.99), s[len(s)-1].Round(10*time.Microsecond))
}
