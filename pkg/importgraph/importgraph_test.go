// Package importgraph_test keeps the rooms of the workspace apart and the
// picture of them true. It reads the import graph of every package in the
// workspace (go list over each module of go.work, test files and the
// integration and e2e tags included) and fails when
//
//   - a service imports a package of another service (services/<a> →
//     services/<b>: services talk through Postgres, Kafka, Redis and gRPC,
//     never through each other's code);
//   - pkg/ imports anything of the workspace but pkg/ and proto/ (in
//     particular services/ or cmd/: shared code knows no binary);
//   - proto/ imports anything of the workspace but proto/;
//   - testkit/ imports anything of the workspace but pkg/ and proto/;
//   - production code of pkg/, services/, cmd/ or proto/ imports testkit/
//     (the kits are for tests: only test files, test helper packages named
//     *test like apitest, bench/, tests/ and deploy/ may use them, so no
//     binary links them);
//   - a package of pkg/ sits in no layer folder, or its production code
//     imports a package of pkg/ its layer may not (layerImports: domain
//     knows only domain and the clock, store clients know no Postgres rows,
//     process plumbing knows only itself; tests may cross layers, no
//     binary links them);
//
// when a binary links the Go client of a component it does not talk to,
// or a test kit; and when docs/architecture/README.md does not name a
// service, a package of pkg/ (pkg/<layer>/<name>), a package directly
// under testkit/, or a command under cmd/.
package importgraph_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is the import path every module of the workspace sits under.
const module = "github.com/sundialhq/sundial/"

// room is where a package of the workspace lives: "service:<name>", "pkg",
// "proto", "cmd:<name>", or the first path element for the rest (testkit,
// bench, tests, deploy). Packages outside the workspace are in no room ("").
func room(path string) string {
	rel, ok := strings.CutPrefix(path, module)
	if !ok {
		return ""
	}
	parts := strings.Split(rel, "/")
	switch parts[0] {
	case "services", "cmd":
		if len(parts) > 1 {
			return strings.TrimSuffix(parts[0], "s") + ":" + parts[1]
		}
	}
	return parts[0]
}

// testHelper reports whether path is a package that exists for tests
// although it has no _test.go suffix: by Go's custom (net/http/httptest)
// its name ends in "test" (apitest, pgtest, itest, tracingtest).
func testHelper(path string) bool {
	return strings.HasSuffix(path[strings.LastIndex(path, "/")+1:], "test")
}

// layerImports is the rule of each layer folder of pkg/: the layers (or
// single packages, "layer/name") that its production code may import.
// docs/architecture/README.md states the same rules in words.
//
//   - process: a service's plumbing (clock, config, lifecycle, admin,
//     daemon, tracing, connsec) knows nothing of Sundial's domain or its
//     stores, so any of them can use it;
//   - domain: what a job, a schedule, a firing and a tenant's limits are,
//     talking to no component; it reads the time only through the
//     injected clock;
//   - store: the Redis, Cassandra, ZooKeeper and Kafka clients; they carry
//     domain values and use the plumbing, and know no Postgres rows;
//   - postgres: the rows, schema and NOTIFYs in Postgres; ledgerttl checks
//     a tenant's TTL against the ledger's bounds, its one store import;
//   - client: the api's Go client, linked by schedctl, so it links neither
//     a store nor Postgres;
//   - importgraph: this check, tests only.
var layerImports = map[string][]string{
	"process":     {"process"},
	"domain":      {"domain", "process/clock"},
	"store":       {"store", "domain", "process"},
	"postgres":    {"postgres", "domain", "process", "store/ledger"},
	"client":      {"client", "domain", "process"},
	"importgraph": nil,
}

// layer is the layer folder of a package of pkg/ ("domain", "store", …),
// "" when path is outside pkg/ or in no layer folder. rel is path below
// pkg/.
func layer(path string) (name, rel string) {
	rel, ok := strings.CutPrefix(path, module+"pkg/")
	if !ok {
		return "", ""
	}
	first, _, _ := strings.Cut(rel, "/")
	if _, ok := layerImports[first]; !ok {
		return "", rel
	}
	return first, rel
}

// layerViolation says why from, a package of pkg/, may not import to,
// another package of pkg/, or "" when it may.
func layerViolation(from, to string) string {
	lf, _ := layer(from)
	lt, rt := layer(to)
	if lf == "" {
		return "a package of pkg/ sits in a layer folder (" + strings.Join(slices.Sorted(maps.Keys(layerImports)), ", ") + ")"
	}
	for _, ok := range layerImports[lf] {
		if lt == ok || rt == ok || strings.HasPrefix(rt, ok+"/") {
			return ""
		}
	}
	return "pkg/" + lf + " may import only " + strings.Join(layerImports[lf], ", ") + " of pkg/ (see layerImports)"
}

// violation says why from may not import to, or "" when it may. test is
// whether the import is made by a test file of from.
func violation(from, to string, test bool) string {
	rf, rt := room(from), room(to)
	if rf == "pkg" && rt == "pkg" && !test {
		return layerViolation(from, to)
	}
	if rt == "" || rf == rt {
		return ""
	}
	switch {
	case rt == "testkit":
		if test || testHelper(from) {
			return ""
		}
		switch {
		case rf == "pkg", rf == "proto", strings.HasPrefix(rf, "service:"), strings.HasPrefix(rf, "cmd:"):
			return "production code imports no test kit (testkit/ is for tests, bench and e2e; a binary never links it)"
		}
		return ""
	case rf == "testkit" && rt != "pkg" && rt != "proto":
		return "testkit/ imports only pkg/ and proto/ from the workspace (a kit knows no service's or command's code)"
	case strings.HasPrefix(rf, "service:") && strings.HasPrefix(rt, "service:"):
		return "a service imports no other service's packages (they meet through Postgres, Kafka, Redis and gRPC)"
	case rf == "pkg" && rt != "proto":
		return "pkg/ imports only pkg/ and proto/ from the workspace (never services/ or cmd/)"
	case rf == "proto":
		return "proto/ imports nothing else from the workspace"
	}
	return ""
}

func TestViolationRules(t *testing.T) {
	for _, c := range []struct {
		from, to string
		bad      bool
		test     bool // the import is made by a test file of from
	}{
		{"services/api/internal/store", "services/api/internal/server", false, false},
		{"services/api/internal/store", "pkg/postgres/outbox", false, false},
		{"services/api", "proto/sundial/v1", false, false},
		{"services/api/internal/store", "services/worker/internal/settle", true, false},
		{"services/relay", "services/prefetcher/internal/stage", true, false},
		{"pkg/postgres/outbox", "proto/sundial/v1", false, false},
		{"pkg/postgres/outbox", "pkg/domain/firing", false, false},
		{"pkg/postgres/outbox", "services/relay/internal/outbox", true, false},
		{"testkit/harness", "cmd/schedctl", true, false},
		{"testkit/harness", "bench/internal/scenario", true, false},
		{"proto/sundial/v1", "pkg/domain/firing", true, false},
		{"cmd/schedctl", "pkg/client", false, false},
		{"bench/cmd/bench", "testkit/harness", false, false},
		{"testkit/harness", "pkg/postgres/migrations", false, false},
		{"testkit/harness", "services/api/internal/store", true, true},
		{"pkg/store/lease", "testkit/testinfra", false, true},
		{"pkg/store/lease", "testkit/testinfra", true, false},
		{"services/worker/internal/app", "testkit/testinfra", false, true},
		{"services/worker/internal/app", "testkit/testinfra", true, false},
		{"services/api/internal/apitest", "testkit/testinfra", false, false},
		{"cmd/schedctl", "testkit/tlstest", true, false},
		{"tests/e2e", "testkit/harness", false, false},
		{"deploy/deploytest", "testkit/testinfra", false, false},
		// The layers of pkg/.
		{"pkg/domain/secrets", "pkg/domain/jobspec", false, false},
		{"pkg/domain/secrets", "pkg/process/clock", false, false},
		{"pkg/domain/firing", "pkg/process/config", true, false},
		{"pkg/domain/jobspec", "pkg/postgres/outbox", true, false},
		{"pkg/domain/forecast", "pkg/postgres/calendarstore", true, false},
		{"pkg/domain/firing", "pkg/store/ledger", true, false},
		{"pkg/store/ledger", "pkg/domain/firing", false, false},
		{"pkg/store/lease", "pkg/process/connsec", false, false},
		{"pkg/store/ledger", "pkg/postgres/ledgerpending", true, false},
		{"pkg/store/lease", "pkg/client", true, false},
		{"pkg/postgres/outbox", "pkg/postgres/migrations", false, false},
		{"pkg/postgres/ledgerttl", "pkg/store/ledger", false, false},
		{"pkg/postgres/outbox", "pkg/store/lease", true, false},
		{"pkg/postgres/ledgerttl", "pkg/store/ledgerx", true, false},
		{"pkg/process/daemon", "pkg/process/tracing/tracingtest", false, false},
		{"pkg/process/tracing", "pkg/domain/firing", true, false},
		{"pkg/process/connsec", "pkg/store/lease", true, false},
		{"pkg/process/connsec", "pkg/store/lease", false, true},
		{"pkg/client", "pkg/domain/auth", false, false},
		{"pkg/client", "pkg/process/connsec", false, false},
		{"pkg/client", "pkg/postgres/outbox", true, false},
		{"pkg/importgraph", "pkg/domain/firing", true, false},
		{"pkg/newthing", "pkg/domain/firing", true, false},
		{"pkg/domain/firing", "services/worker/internal/fire", true, true},
	} {
		from, to := module+c.from, module+c.to
		if got := violation(from, to, c.test) != ""; got != c.bad {
			t.Errorf("%s → %s (test %v): violation %v, want %v", c.from, c.to, c.test, got, c.bad)
		}
	}
	if v := violation(module+"pkg/postgres/outbox", "github.com/jackc/pgx/v5", false); v != "" {
		t.Errorf("a third-party import is no violation: %s", v)
	}
}

// workspace is the folder holding the go.work the go command uses here.
func workspace(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOWORK").Output()
	work := strings.TrimSpace(string(out))
	if err != nil || work == "" || work == "off" {
		t.Fatalf("go env GOWORK = %q (%v): the test reads the workspace of go.work", work, err)
	}
	return filepath.Dir(work)
}

func goCmd(t *testing.T, root string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"), "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

type listed struct {
	ImportPath string
	Imports    []string
	Error      *struct{ Err string }
}

// edge is one import of a package; test when only its test files make it.
type edge struct {
	to   string
	test bool
}

// graph lists every package of the workspace's modules with its imports,
// test variants and tagged files included. Test variants ("p [p.test]"),
// external test packages ("p_test [p.test]") and test mains ("p.test") are
// folded into p, their imports marked test; an import of p's own files is
// listed again, unmarked, from p's plain entry.
func graph(t *testing.T, root string) map[string][]edge {
	t.Helper()
	var patterns []string
	sc := bufio.NewScanner(bytes.NewReader(goCmd(t, root, "list", "-m", "-f", "{{.Dir}}")))
	for sc.Scan() {
		if dir := strings.TrimSpace(sc.Text()); dir != "" {
			patterns = append(patterns, dir+"/...")
		}
	}
	if len(patterns) < 2 {
		t.Fatalf("go list -m found the modules %v; want every module of go.work", patterns)
	}
	out := goCmd(t, root, append([]string{"list", "-e", "-test", "-tags", "integration,e2e",
		"-json=ImportPath,Imports,Error"}, patterns...)...)
	g := map[string][]edge{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		if p.Error != nil {
			t.Errorf("%s: %s", p.ImportPath, p.Error.Err)
		}
		path := base(p.ImportPath)
		test := path != p.ImportPath
		for _, imp := range p.Imports {
			g[path] = append(g[path], edge{to: base(imp), test: test})
		}
		if _, ok := g[path]; !ok {
			g[path] = nil
		}
	}
	return g
}

func base(path string) string {
	path, _, _ = strings.Cut(path, " ")
	return strings.TrimSuffix(strings.TrimSuffix(path, ".test"), "_test")
}

func TestImportGraphKeepsTheRoomsApart(t *testing.T) {
	g := graph(t, workspace(t))
	var ours int
	for from, imports := range g {
		if room(from) == "" {
			continue
		}
		ours++
		if l, rel := layer(from); room(from) == "pkg" && l == "" {
			t.Errorf("pkg/%s sits in no layer folder of pkg/: put it in one of %v", rel, slices.Sorted(maps.Keys(layerImports)))
		}
		for _, e := range imports {
			if why := violation(from, e.to, e.test); why != "" {
				t.Errorf("%s imports %s: %s", strings.TrimPrefix(from, module), strings.TrimPrefix(e.to, module), why)
			}
		}
	}
	// A graph that lost most of the workspace would pass vacuously.
	for _, want := range []string{"services/api", "services/prefetcher", "services/relay", "services/worker", "pkg/postgres/outbox", "proto/sundial/v1", "cmd/schedctl", "testkit/harness"} {
		if _, ok := g[module+want]; !ok {
			t.Errorf("go list did not list %s", want)
		}
	}
	if ours < 50 {
		t.Errorf("go list listed %d packages of the workspace; expected every one", ours)
	}
}

// clients are the modules of the components' Go clients, by the name a
// service's table below uses.
var clients = map[string]string{
	"cassandra": "github.com/gocql/gocql",
	"kafka":     "github.com/twmb/franz-go/pkg/kgo",
	"postgres":  "github.com/jackc/pgx/v5",
	"redis":     "github.com/redis/go-redis/v9",
	"zookeeper": "github.com/go-zookeeper/zk",
}

// Each binary links the clients of the components it talks to and no
// other (each client package owns its TLS and credential settings, so
// sharing pkg/process/connsec drags no client along), and never a test kit.
func TestBinariesLinkOnlyTheirClients(t *testing.T) {
	root := workspace(t)
	for bin, want := range map[string][]string{
		"services/api":        {"cassandra", "kafka", "postgres", "redis"},
		"services/prefetcher": {"cassandra", "postgres", "zookeeper"},
		"services/relay":      {"kafka", "postgres"},
		"services/worker":     {"cassandra", "kafka", "postgres", "redis"},
		"cmd/schedctl":        nil,
	} {
		deps := strings.Fields(string(goCmd(t, root, "list", "-deps", "-f", "{{.ImportPath}}", "./"+bin)))
		var got []string
		for name, pkg := range clients {
			if slices.Contains(deps, pkg) {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s links the clients %v, want %v", bin, got, want)
		}
		for _, d := range deps {
			if room(d) == "testkit" {
				t.Errorf("%s links the test kit %s", bin, strings.TrimPrefix(d, module))
			}
		}
	}
}

// The architecture picture names every room: each service, each package
// of pkg/ (pkg/<layer>/<name>, or pkg/<name> for a layer of one package),
// each package directly under testkit/ and each command under cmd/.
func TestArchitecturePictureNamesEveryRoom(t *testing.T) {
	root := workspace(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rooms []string
	for from := range graph(t, root) {
		rel, ok := strings.CutPrefix(from, module)
		if !ok {
			continue
		}
		parts := strings.Split(rel, "/")
		if l, _ := layer(from); l != "" && len(parts) >= 3 && l == parts[1] {
			rooms = append(rooms, strings.Join(parts[:3], "/"))
			continue
		}
		if len(parts) >= 2 && (parts[0] == "services" || parts[0] == "pkg" || parts[0] == "testkit" || parts[0] == "cmd") {
			rooms = append(rooms, parts[0]+"/"+parts[1])
		}
	}
	slices.Sort(rooms)
	rooms = slices.Compact(rooms)
	for _, r := range rooms {
		if !bytes.Contains(doc, []byte(r)) {
			t.Errorf("docs/architecture/README.md does not name %s: add it to the picture of the rooms", r)
		}
	}
	if len(rooms) < 10 {
		t.Fatalf("found the rooms %v; expected every service and package", rooms)
	}
}
