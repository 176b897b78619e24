package bench

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/testkit/harness"
)

// chaosFixture is one job firing every second from t0 for n seconds, and a
// chaos run that knows it.
func chaosFixture(t0 time.Time, n int) (*chaos, harness.Expected, uuid.UUID) {
	job := uuid.Must(uuid.NewV7())
	want := harness.Expected{}
	for i := range n {
		at := t0.Add(time.Duration(i) * time.Second)
		want[firing.ExecutionID(job, at)] = harness.Slot{JobID: job, Scheduled: at, FireAt: at, Via: harness.ViaHTTP}
	}
	c := &chaos{jobs: &jobSet{ids: map[uuid.UUID]bool{job: true}}, start: t0, end: t0.Add(time.Duration(n) * time.Second),
		baseP99: 10 * time.Millisecond, threshold: 300 * time.Millisecond}
	return c, want, job
}

func deliver(job uuid.UUID, at time.Time, late time.Duration) harness.Delivery {
	return harness.Delivery{Via: harness.ViaHTTP, ExecutionID: firing.ExecutionID(job, at), JobID: job, Scheduled: at, Received: at.Add(late),
		Fence: at.Unix()}
}

func TestChaosRowRecovery(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c, want, job := chaosFixture(t0, 10)
	var got []harness.Delivery
	for i := range 10 {
		late := 10 * time.Millisecond
		switch i {
		case 3:
			late = 2 * time.Second // the fault's worst
		case 5:
			late = time.Second // the last late one: arrives at t0+6s
		}
		got = append(got, deliver(job, t0.Add(time.Duration(i)*time.Second), late))
	}
	row := chaosRow{start: t0.Add(2 * time.Second), ended: t0.Add(10 * time.Second)}
	a := c.analyze(want, got, row.start, row.ended)
	if a.Expected != 8 || a.Missing != 0 {
		t.Fatalf("the row's window: %+v", a)
	}
	late, recovered := c.recovery(a, want, got, row)
	// added lateness is beyond the baseline p99 (10 ms): 2 s → 1990 ms (the max),
	// 1 s → 990 ms (the p99 of 8, nearest rank below)
	if late != "990 ms / 1990 ms" {
		t.Errorf("added lateness = %q", late)
	}
	if recovered != "4000 ms" {
		t.Errorf("time to recover = %q, want the last late arrival (t0+6s) minus the fault (t0+2s)", recovered)
	}

	// Nothing late: no recovery to speak of.
	_, recovered = c.recovery(c.analyze(want, got, t0.Add(7*time.Second), row.ended), want, got,
		chaosRow{start: t0.Add(7 * time.Second), ended: row.ended})
	if recovered != "– (none late)" {
		t.Errorf("a calm row recovered in %q", recovered)
	}

	// A lost firing: never recovered, and the analysis says lost.
	lossy := append([]harness.Delivery(nil), got[:4]...)
	lossy = append(lossy, got[5:]...)
	a = c.analyze(want, lossy, row.start, row.ended)
	if _, recovered := c.recovery(a, want, lossy, row); a.Missing != 1 || recovered != "never (lost firings)" {
		t.Errorf("lost firing: missing %d, recovered %q", a.Missing, recovered)
	}
	// The same firing skipped by its job's misfire policy is not lost:
	// the row recovers as its fired firings did.
	shed := row
	shed.skipped = 1
	if _, recovered := c.recovery(a, want, lossy, shed); recovered == "never (lost firings)" {
		t.Errorf("a firing skipped by misfire policy counted as lost: recovered %q", recovered)
	}
}

// Deliveries of the matrix's jobs for slots outside the matrix (the jobs
// keep firing until they are deleted) are not unexpected; a slot inside it
// that nobody expected is.
func TestChaosAnalyzeIgnoresSlotsOutsideTheMatrix(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c, want, job := chaosFixture(t0, 5)
	var got []harness.Delivery
	for i := range 7 { // two seconds past the matrix's end
		got = append(got, deliver(job, t0.Add(time.Duration(i)*time.Second), 0))
	}
	a := c.analyze(want, got, t0, c.end)
	if !a.Clean() || a.Unexpected != 0 || a.Expected != 5 {
		t.Fatalf("after the end: %+v", a)
	}
	odd := got[2]
	odd.ExecutionID = uuid.Must(uuid.NewV7()) // the same slot under another id
	odd.Fence = -1
	a = c.analyze(want, append(got, odd), t0, c.end)
	if a.Unexpected != 1 || a.DuplicateEffects != 1 || a.Clean() {
		t.Fatalf("a second execution of a slot: %+v", a)
	}
}

func TestChaosLedgerGapsByRow(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c, want, job := chaosFixture(t0, 10)
	rows := []chaosRow{
		{f: fault{name: "kill-worker"}, start: t0.Add(2 * time.Second), ended: t0.Add(5 * time.Second)},
		{f: fault{name: "worker-cut-kafka"}, start: t0.Add(6 * time.Second), ended: t0.Add(9 * time.Second)},
	}
	at := func(s int) uuid.UUID { return firing.ExecutionID(job, t0.Add(time.Duration(s)*time.Second)) }
	got := c.gapsByRow(want, []uuid.UUID{at(0), at(2), at(4), at(5), at(7), at(9)}, rows)
	const wantText = "1 due in the baseline (12:00:00.000–12:00:00.000), 1 due in worker-cut-kafka (12:00:07.000–12:00:07.000), " +
		"2 due in between rows (12:00:05.000–12:00:09.000), 2 due in kill-worker (12:00:02.000–12:00:04.000)"
	if got != wantText {
		t.Fatalf("gapsByRow = %q, want %q", got, wantText)
	}
}

// A deployment on clustered components takes their failover rows and
// refuses the rows that act on those components' single nodes; a cluster
// row needs its cluster.
func TestChaosRowsForTheDeployment(t *testing.T) {
	single := Deploy{}
	if got := ChaosRowsFor(single); !slices.Equal(got, ChaosRows) {
		t.Errorf("single node rows %v, want %v", got, ChaosRows)
	}
	redisOnly := Deploy{RedisCluster: "127.0.0.1:7101,127.0.0.1:7102"}
	rows := ChaosRowsFor(redisOnly)
	for _, r := range singleNodeRows["redis"] {
		if slices.Contains(rows, r) {
			t.Errorf("Redis Cluster rows %v hold the single-Redis row %s", rows, r)
		}
	}
	if !slices.Contains(rows, "redis-cluster-primary-kill") || !slices.Contains(rows, "kill-worker") ||
		!slices.Contains(rows, "kafka-restart") || slices.Contains(rows, "kafka-broker-kill") {
		t.Errorf("Redis Cluster rows %v", rows)
	}
	all := Deploy{RedisCluster: "127.0.0.1:7101", Clustered: []string{"zookeeper", "postgres", "kafka", "cassandra"}}
	rows = ChaosRowsFor(all)
	for _, want := range ChaosClusterRows {
		if !slices.Contains(rows, want) {
			t.Errorf("every component clustered: rows %v lack %s", rows, want)
		}
	}
	for _, gone := range []string{"postgres-stop", "zookeeper-stop", "kafka-restart", "worker-cut-kafka", "redis-flush", "cassandra-stop"} {
		if slices.Contains(rows, gone) {
			t.Errorf("every component clustered: rows %v hold %s", rows, gone)
		}
	}
	if err := CheckChaosRows(rows, all); err != nil {
		t.Errorf("the deployment's own rows refused: %v", err)
	}
	for _, tc := range []struct {
		rows []string
		d    Deploy
		want string
	}{
		{[]string{"redis-cluster-primary-kill"}, single, "--cluster redis"},
		{[]string{"kill-worker", "postgres-primary-kill"}, redisOnly, "--cluster postgres"},
		{[]string{"kill-worker", "redis-flush"}, redisOnly, "redis-flush"},
		{[]string{"zookeeper-stop"}, all, "zookeeper-stop"},
	} {
		if err := CheckChaosRows(tc.rows, tc.d); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rows %v on %+v: %v, want an error naming %q", tc.rows, tc.d, err, tc.want)
		}
	}
}

func TestOnlineReplicaIsReadFromInfo(t *testing.T) {
	info := "# Replication\r\nrole:master\r\nconnected_slaves:2\r\nslave0:ip=127.0.0.1,port=7104,state=wait_bgsave,offset=0,lag=0\r\nslave1:ip=127.0.0.1,port=7105,state=online,offset=1234,lag=0\r\nmaster_repl_offset:1234\r\n"
	if got := onlineReplica(info); got != "127.0.0.1:7105" {
		t.Errorf("online replica %q, want 127.0.0.1:7105", got)
	}
	if got := onlineReplica("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"); got != "" {
		t.Errorf("no replica: %q", got)
	}
}

// The ledger-refuses row sets the keyspace's replication back from what
// system_schema.keyspaces held: the literal must name every entry, the
// class included, so the keyspace ends as it began.
func TestReplicationLiteralWritesTheMapBack(t *testing.T) {
	got := replicationLiteral(map[string]string{"replication_factor": "1", "class": "org.apache.cassandra.locator.SimpleStrategy"})
	want := "{'class': 'org.apache.cassandra.locator.SimpleStrategy', 'replication_factor': '1'}"
	if got != want {
		t.Errorf("replicationLiteral = %s, want %s", got, want)
	}
	nts := replicationLiteral(map[string]string{"class": "org.apache.cassandra.locator.NetworkTopologyStrategy", "datacenter1": "3"})
	if !strings.Contains(nts, "'datacenter1': '3'") || !strings.HasPrefix(nts, "{'class': ") {
		t.Errorf("replicationLiteral of a NetworkTopologyStrategy map = %s", nts)
	}
}

// The member-stall row picks the follower most clients are connected to,
// counted from /proc/net/tcp: established lines whose remote port is the
// member's client port (the servers' own ends, local port 2192, are not
// its clients).
func TestCountEstablishedToReadsTheRemotePort(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A1B2 0100007F:0890 01 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 20 4 30 10 -1
   1: 0100007F:A1B3 0100007F:0890 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:0890 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:A1B4 0100007F:0890 06 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 20 4 30 10 -1
   4: 0100007F:A1B5 0100007F:0891 01 00000000:00000000 00:00000000 00000000     0        0 5 1 0000000000000000 20 4 30 10 -1
`
	if got := countEstablishedTo(table, 2192); got != 2 {
		t.Errorf("connections to 2192: %d, want 2 (a TIME_WAIT and the server's own end left out)", got)
	}
	if got := countEstablishedTo(table, 2193); got != 1 {
		t.Errorf("connections to 2193: %d, want 1", got)
	}
}
