package testinfra

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// docker-compose.yml cannot run on machines without a Docker engine (CI and
// the project's own), so this test is what keeps it honest: it parses the
// file and the Dockerfile and checks the structure the platform relies on.

// composeFile is the part of the Compose format the checks read.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string            `yaml:"context"`
		Dockerfile string            `yaml:"dockerfile"`
		Target     string            `yaml:"target"`
		Args       map[string]string `yaml:"args"`
	} `yaml:"build"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

// The components, their images and the host port each publishes: the same
// numbers as deploy/local/infra.sh's defaults, so tests work against either.
var composeComponents = map[string]struct{ image, port string }{
	"postgres":  {"postgres:15", "5432"},
	"redis":     {"redis:7", "6379"},
	"zookeeper": {"zookeeper:3.9", "2181"},
	"kafka":     {"apache/kafka:3.9", "9092"},
	"cassandra": {"cassandra:5.0", "9042"},
}

// The services, their admin ports (platform.sh's) and the components each
// must wait for.
var composeSundial = map[string]struct {
	admin string
	needs []string
}{
	"api":        {"8081", []string{"postgres", "redis", "cassandra"}},
	"prefetcher": {"8082", []string{"postgres", "zookeeper", "api"}},
	"relay":      {"8083", []string{"postgres", "kafka", "api"}},
	"worker":     {"8084", []string{"redis", "kafka", "cassandra", "api"}},
}

// Where each service finds a component inside the compose network.
var composeAddrs = map[string]string{
	"SUNDIAL_POSTGRES_DSN":    "@postgres:5432/",
	"SUNDIAL_REDIS_ADDR":      "redis:6379",
	"SUNDIAL_ZK_ADDRS":        "zookeeper:2181",
	"SUNDIAL_KAFKA_BROKERS":   "kafka:19092",
	"SUNDIAL_CASSANDRA_HOSTS": "cassandra:9042",
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the working directory")
		}
		dir = parent
	}
}

// dockerStages returns the stage names (FROM ... AS name) and build args
// (ARG name) declared in a Dockerfile.
func dockerStages(dockerfile []byte) (stages, args []string) {
	from := regexp.MustCompile(`(?i)^FROM\s+\S+(?:\s+AS\s+(\S+))?\s*$`)
	arg := regexp.MustCompile(`(?i)^ARG\s+([A-Za-z_][A-Za-z0-9_]*)`)
	sc := bufio.NewScanner(bytes.NewReader(dockerfile))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := from.FindStringSubmatch(line); m != nil && m[1] != "" {
			stages = append(stages, m[1])
		}
		if m := arg.FindStringSubmatch(line); m != nil {
			args = append(args, m[1])
		}
	}
	return stages, args
}

// checkCompose returns every way doc falls short; root is the repository
// (for services/<name>/main.go), stages and args come from the Dockerfile.
func checkCompose(doc composeFile, root string, stages, args []string) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	for name, want := range composeComponents {
		s, ok := doc.Services[name]
		if !ok {
			bad("service %s is missing", name)
			continue
		}
		if !strings.HasPrefix(s.Image, want.image) {
			bad("%s: image %q, want %s*", name, s.Image, want.image)
		}
		if !slices.Contains(s.Ports, "127.0.0.1:"+want.port+":"+want.port) {
			bad("%s: ports %v, want 127.0.0.1:%s:%s", name, s.Ports, want.port, want.port)
		}
	}
	for name, want := range composeSundial {
		s, ok := doc.Services[name]
		if !ok {
			bad("service %s is missing", name)
			continue
		}
		switch b := s.Build; {
		case b == nil:
			bad("%s: no build section", name)
		default:
			if b.Context != "." || b.Dockerfile != "Dockerfile" {
				bad("%s: builds from %s/%s, want ./Dockerfile", name, b.Context, b.Dockerfile)
			}
			if !slices.Contains(stages, b.Target) {
				bad("%s: target %q is not a stage of the Dockerfile (stages %v)", name, b.Target, stages)
			}
			if b.Args["SERVICE"] != name {
				bad("%s: build arg SERVICE=%q, want %q", name, b.Args["SERVICE"], name)
			}
			for a := range b.Args {
				if !slices.Contains(args, a) {
					bad("%s: build arg %s is not declared (ARG) in the Dockerfile", name, a)
				}
			}
			if _, err := os.Stat(filepath.Join(root, "services", name, "main.go")); err != nil {
				bad("%s: SERVICE=%s has no services/%s/main.go", name, name, name)
			}
		}
		if got := s.Environment["SUNDIAL_ADMIN_ADDR"]; got != "0.0.0.0:"+want.admin {
			bad("%s: SUNDIAL_ADMIN_ADDR=%q, want 0.0.0.0:%s (reachable through the published port)", name, got, want.admin)
		}
		if !slices.Contains(s.Ports, "127.0.0.1:"+want.admin+":"+want.admin) {
			bad("%s: ports %v, want the admin port 127.0.0.1:%s:%s", name, s.Ports, want.admin, want.admin)
		}
		for _, dep := range want.needs {
			if _, ok := s.DependsOn[dep]; !ok {
				bad("%s: does not depend on %s", name, dep)
			}
		}
		for env, addr := range composeAddrs {
			if v, ok := s.Environment[env]; ok && !strings.Contains(v, addr) {
				bad("%s: %s=%q does not point at %s", name, env, v, addr)
			}
		}
		if hc := s.Healthcheck; hc != nil && !strings.Contains(strings.Join(hc.Test, " "), "127.0.0.1:"+want.admin+"/readyz") {
			bad("%s: healthcheck %v does not ask its /readyz", name, hc.Test)
		}
	}
	for name, s := range doc.Services {
		if s.Healthcheck == nil || len(s.Healthcheck.Test) == 0 {
			bad("%s: no healthcheck", name)
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				bad("%s: port %q is published beyond loopback", name, p)
			}
		}
		for dep, cond := range s.DependsOn {
			d, ok := doc.Services[dep]
			switch {
			case !ok:
				bad("%s: depends on undefined service %s", name, dep)
			case cond.Condition != "service_healthy":
				bad("%s: depends on %s with condition %q, want service_healthy", name, dep, cond.Condition)
			case d.Healthcheck == nil:
				bad("%s: depends on %s, which has no healthcheck to wait for", name, dep)
			}
		}
	}
	return errs
}

func loadCompose(t *testing.T) (composeFile, string, []string, []string) {
	t.Helper()
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc composeFile
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	df, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages, args := dockerStages(df)
	return doc, root, stages, args
}

func TestComposeFile(t *testing.T) {
	doc, root, stages, args := loadCompose(t)
	if len(stages) < 2 {
		t.Errorf("Dockerfile stages %v: want a multi-stage build", stages)
	}
	for _, err := range checkCompose(doc, root, stages, args) {
		t.Error(err)
	}
}

// The checks must catch the damage they exist for: take the real file, break
// it one way at a time, and expect a complaint each time.
func TestComposeChecksCatchBreakage(t *testing.T) {
	doc, root, stages, args := loadCompose(t)
	clone := func() composeFile {
		c := composeFile{Services: map[string]composeService{}}
		for k, v := range doc.Services {
			if v.Build != nil {
				b := *v.Build
				v.Build = &b
			}
			c.Services[k] = v
		}
		return c
	}
	breakages := map[string]func(c composeFile){
		"a service removed":   func(c composeFile) { delete(c.Services, "relay") },
		"a component removed": func(c composeFile) { delete(c.Services, "zookeeper") },
		"a port on every interface": func(c composeFile) {
			s := c.Services["redis"]
			s.Ports = []string{"6379:6379"}
			c.Services["redis"] = s
		},
		"an unknown build target": func(c composeFile) {
			s := c.Services["worker"]
			s.Build.Target = "nope"
			c.Services["worker"] = s
		},
		"a healthcheck removed": func(c composeFile) {
			s := c.Services["kafka"]
			s.Healthcheck = nil
			c.Services["kafka"] = s
		},
		"the wrong SERVICE": func(c composeFile) {
			s := c.Services["api"]
			s.Build.Args = map[string]string{"SERVICE": "worker"}
			c.Services["api"] = s
		},
	}
	for name, breakIt := range breakages {
		c := clone()
		breakIt(c)
		if errs := checkCompose(c, root, stages, args); len(errs) == 0 {
			t.Errorf("%s: the checks found nothing wrong", name)
		}
	}
	if errs := checkCompose(composeFile{}, root, stages, args); len(errs) != len(composeComponents)+len(composeSundial) {
		t.Errorf("an empty file: %d complaints, want one per missing service", len(errs))
	}
}
