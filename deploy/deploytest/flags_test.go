package deploytest

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// serviceFlags builds the four services (from the Go build cache after the
// first time) and reads the flags each one declares from its -h output, so
// the chart is checked against the flags the code has today — including
// those added after the chart was written.
var flagsOnce sync.Map // service -> map[string]bool

func serviceFlags(t *testing.T, svc string, subcommand ...string) map[string]bool {
	t.Helper()
	key := strings.Join(append([]string{svc}, subcommand...), " ")
	if v, ok := flagsOnce.Load(key); ok {
		return v.(map[string]bool)
	}
	bin := filepath.Join(t.TempDir(), "sundial-"+svc)
	run(t, repoPath(t, "services", svc), "go", "build", "-o", bin, ".")
	// -h prints the usage to stderr and exits 2.
	out, _ := exec.Command(bin, append(subcommand, "-h")...).CombinedOutput()
	flags := map[string]bool{}
	re := regexp.MustCompile(`(?m)^\s+-([a-z0-9][a-z0-9-]*)`)
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 5 {
		t.Fatalf("sundial-%s -h listed %d flags:\n%s", svc, len(flags), out)
	}
	flagsOnce.Store(key, flags)
	return flags
}

// envFlag turns SUNDIAL_GRPC_STOP_TIMEOUT into grpc-stop-timeout.
func envFlag(env string) (string, bool) {
	rest, ok := strings.CutPrefix(env, "SUNDIAL_")
	if !ok {
		return "", false
	}
	return strings.ToLower(strings.ReplaceAll(rest, "_", "-")), true
}

// mustSet are flags the chart must set on every service that has them.
var mustSet = []string{
	"admin-addr", "postgres-dsn", "redis-addr", "redis-key-prefix", "zk-addrs", "kafka-brokers",
	"topic-prefix", "cassandra-hosts", "cassandra-keyspace", "group", "drain-timeout",
}

// TestChartSetsOnlyRealFlags: every SUNDIAL_* variable the chart gives a
// service (ConfigMap or env entry) names a flag that service has. A service
// silently ignores a variable for a flag it lacks, so a typo or a renamed
// flag would otherwise go unnoticed until production.
func TestChartSetsOnlyRealFlags(t *testing.T) {
	for name, values := range valuesFiles(t) {
		t.Run(name, func(t *testing.T) {
			objs, err := render(t, values)
			if err != nil {
				t.Fatal(err)
			}
			for _, svc := range services {
				flags := serviceFlags(t, svc)
				var vars []string
				if cm := find(objs, "ConfigMap", "-"+svc); cm != nil {
					for k := range mapOf(dig(cm, "data")) {
						vars = append(vars, k)
					}
				}
				if dep := find(objs, "Deployment", "-"+svc); dep != nil {
					for _, c := range list(dig(dep, "spec", "template", "spec", "containers")) {
						for _, e := range list(dig(c, "env")) {
							vars = append(vars, str(dig(e, "name")))
						}
					}
				}
				set := map[string]bool{}
				for _, v := range vars {
					f, ok := envFlag(v)
					if ok && !flags[f] {
						t.Errorf("%s: the chart sets %s, but sundial-%s has no --%s", svc, v, svc, f)
					}
					set[f] = true
				}
				// The other way round for the settings whose defaults are
				// wrong in a cluster (127.0.0.1 addresses, shared names): a
				// service that gains one must get it from the chart.
				for _, f := range mustSet {
					if flags[f] && !set[f] {
						t.Errorf("%s: sundial-%s has --%s, but the chart does not set it (the default is wrong in a cluster)", svc, svc, f)
					}
				}
			}
			checkJobFlags(t, objs)
		})
	}
	// The tls values migrate on start; the hook Job with Cassandra's TLS
	// and credentials is rendered here.
	t.Run("tls with the migration Job", func(t *testing.T) {
		objs, err := render(t, valuesFiles(t)["tls"], "migrate.enabled=true")
		if err != nil {
			t.Fatal(err)
		}
		if len(byKind(objs, "Job")) != 1 {
			t.Fatal("no migration Job rendered")
		}
		checkJobFlags(t, objs)
		checkInvariants(t, "tls", objs)
	})
}

// checkJobFlags: the migration Job runs `sundial-api migrate`, whose flags
// are its own.
func checkJobFlags(t *testing.T, objs []object) {
	t.Helper()
	for _, job := range byKind(objs, "Job") {
		flags := serviceFlags(t, "api", "migrate")
		for _, c := range list(dig(job, "spec", "template", "spec", "containers")) {
			for _, e := range list(dig(c, "env")) {
				if f, ok := envFlag(str(dig(e, "name"))); ok && !flags[f] {
					t.Errorf("migrate Job: sets %s, but sundial-api migrate has no --%s", str(dig(e, "name")), f)
				}
			}
		}
	}
}
