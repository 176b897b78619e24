package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/testkit/harness"
)

// Environment is what a run's figures depend on besides the code: the
// machine, the components' versions and their durability settings.
type Environment struct {
	Machine    string
	Versions   string
	Durability string
	LoadStart  string
}

// Describe reads the machine and the components. Unknown items say so
// rather than failing the run.
func Describe(ctx context.Context, infraDir string, in harness.Infra) Environment {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var e Environment
	e.Machine = machine()
	e.LoadStart = loadAvg()

	pgVersion, pgDurable := postgresInfo(ctx, in.PostgresDSN)
	kVersion, kFlush := kafkaInfo(ctx, in.KafkaBrokers)
	cVersion, cSync := cassandraInfo(ctx, in)
	rVersion, rPersist := redisInfo(ctx, in.RedisAddr)
	zVersion := zookeeperVersion(in.ZooKeeperAddrs)
	zSync := zookeeperForceSync(infraDir)
	e.Versions = fmt.Sprintf("Go %s; PostgreSQL %s; Kafka %s; Cassandra %s; Redis %s; ZooKeeper %s",
		strings.TrimPrefix(runtime.Version(), "go"), pgVersion, kVersion, cVersion, rVersion, zVersion)
	brokers := "one broker, acks=all on one replica"
	if n := len(in.KafkaBrokers); n > 1 {
		// The cluster profile's brokers (deploy/local/cluster/kafka.sh).
		brokers = fmt.Sprintf("%d brokers, acks=all, topics at the brokers' default replication (3, min.insync.replicas 2 in the cluster profile)", n)
	}
	e.Durability = fmt.Sprintf("PostgreSQL %s; Kafka %s, %s; Cassandra %s; Redis %s; ZooKeeper %s",
		pgDurable, kFlush, brokers, cSync, rPersist, zSync)
	return e
}

func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := "unknown memory"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				_, _ = fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kb)
				mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d cores (%s), %s RAM%s; all five components and the four services on this one machine, on loopback",
		runtime.NumCPU(), model, mem, kernel)
}

// loadAvg is /proc/loadavg's 1, 5 and 15 minute averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// LoadAvg is the load average now (1, 5, 15 minutes).
func LoadAvg() string { return loadAvg() }

func postgresInfo(ctx context.Context, dsn string) (version, durability string) {
	version, durability = "unknown", "unknown"
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_ = conn.QueryRow(ctx, `SHOW server_version`).Scan(&version)
	var fsync, sync, fpw string
	if err := conn.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'), current_setting('full_page_writes')`).Scan(&fsync, &sync, &fpw); err == nil {
		durability = fmt.Sprintf("fsync=%s synchronous_commit=%s full_page_writes=%s", fsync, sync, fpw)
		if fsync == "on" && sync == "on" {
			durability += " (durable commits)"
		} else {
			durability += " (NOT durable: a crash can lose committed transactions)"
		}
	}
	return
}

func kafkaInfo(ctx context.Context, brokers []string) (version, flush string) {
	version, flush = "unknown", "flush settings unknown"
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if vs, err := adm.ApiVersions(ctx); err == nil {
		for _, v := range vs.Sorted() {
			version = strings.TrimPrefix(v.VersionGuess(), "v")
			break
		}
	}
	if rcs, err := adm.DescribeBrokerConfigs(ctx, 1); err == nil {
		for _, rc := range rcs {
			for _, c := range rc.Configs {
				if c.Key == "log.flush.interval.messages" {
					flush = "log.flush.interval.messages=" + c.MaybeValue() + " (the page cache, no fsync per write)"
					if v := c.MaybeValue(); v == "1" {
						flush = "log.flush.interval.messages=1 (fsync per write)"
					}
				}
			}
		}
	}
	return
}

func cassandraInfo(ctx context.Context, in harness.Infra) (version, sync string) {
	version, sync = "unknown", "commitlog settings unknown"
	c := in.CassandraCluster()
	c.Timeout = 10 * time.Second
	s, err := c.CreateSession()
	if err != nil {
		return
	}
	defer s.Close()
	_ = s.Query(`SELECT release_version FROM system.local`).WithContext(ctx).Scan(&version)
	var mode, period string
	_ = s.Query(`SELECT value FROM system_views.settings WHERE name = 'commitlog_sync'`).WithContext(ctx).Scan(&mode)
	_ = s.Query(`SELECT value FROM system_views.settings WHERE name = 'commitlog_sync_period'`).WithContext(ctx).Scan(&period)
	if mode != "" {
		sync = "commitlog_sync=" + mode
		if period != "" {
			sync += " every " + period
		}
	}
	return
}

func redisInfo(ctx context.Context, addr string) (version, persistence string) {
	version, persistence = "unknown", "persistence unknown"
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				version = v
			}
		}
	}
	aof, err1 := rdb.ConfigGet(ctx, "appendonly").Result()
	save, err2 := rdb.ConfigGet(ctx, "save").Result()
	if errors.Join(err1, err2) == nil {
		persistence = fmt.Sprintf("appendonly=%s save=%q", aof["appendonly"], save["save"])
		if aof["appendonly"] == "no" && save["save"] == "" {
			persistence += " (no persistence: a restart loses leases and done markers, fences stay monotonic by their time floor)"
		}
	}
	return
}

func zookeeperVersion(addrs []string) string {
	if len(addrs) == 0 {
		return "unknown"
	}
	c, err := net.DialTimeout("tcp", addrs[0], 3*time.Second)
	if err != nil {
		return "unknown"
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return "unknown"
	}
	buf := make([]byte, 4096)
	n, _ := c.Read(buf)
	for line := range strings.SplitSeq(string(buf[:n]), "\n") {
		if v, ok := strings.CutPrefix(line, "Zookeeper version: "); ok {
			v, _, _ = strings.Cut(v, ",")
			v, _, _ = strings.Cut(v, "-")
			return v
		}
	}
	return "unknown"
}

func zookeeperForceSync(infraDir string) string {
	b, err := os.ReadFile(filepath.Join(infraDir, "zookeeper", "conf", "zoo.cfg"))
	if err != nil {
		return "forceSync unknown"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "forceSync="); ok {
			return "forceSync=" + v
		}
	}
	return "forceSync=yes (default)"
}

// Markdown renders a run as a section of docs/benchmarks.md.
func Markdown(title, command string, env Environment, loadEnd, shape string, results []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", title)
	fmt.Fprintf(&b, "- Command: `%s`\n", command)
	fmt.Fprintf(&b, "- Machine: %s\n", env.Machine)
	fmt.Fprintf(&b, "- Load average (1/5/15 min) at the start: %s; at the end: %s\n", env.LoadStart, loadEnd)
	fmt.Fprintf(&b, "- Versions: %s\n", env.Versions)
	fmt.Fprintf(&b, "- Durability: %s\n", env.Durability)
	fmt.Fprintf(&b, "- Load shape: %s\n\n", shape)
	for _, r := range results {
		fmt.Fprintf(&b, "**%s**\n\n", r.Scenario)
		if r.Deployment != "" {
			fmt.Fprintf(&b, "Deployment: %s\n\n", r.Deployment)
		}
		fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(r.Header, " | "), strings.Repeat("---|", len(r.Header)))
		for _, row := range append([][]string{r.Row}, r.Rows...) {
			if len(row) > 0 {
				fmt.Fprintf(&b, "| %s |\n", strings.Join(row, " | "))
			}
		}
		b.WriteString("\n")
		for _, d := range r.Details {
			fmt.Fprintf(&b, "- %s\n", d)
		}
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "- PROBLEM: %s\n", p)
		}
		b.WriteString("\n")
	}
	return b.String()
}
