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
	Profiles    []string          `yaml:"profiles"`
	Volumes     []string          `yaml:"volumes"`
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
	"prefetcher": {"8082", []string{"postgres", "zookeeper", "cassandra", "api"}},
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
	hostPorts := map[string]string{}
	for name, s := range doc.Services {
		oneShot := slices.Contains(s.Profiles, "tools")
		if !oneShot && (s.Healthcheck == nil || len(s.Healthcheck.Test) == 0) {
			bad("%s: no healthcheck", name)
		}
		for _, p := range s.Ports {
			parts := strings.Split(p, ":")
			if len(parts) == 3 {
				if other, dup := hostPorts[parts[1]]; dup {
					bad("%s and %s both publish host port %s", name, other, parts[1])
				}
				hostPorts[parts[1]] = name
			}
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
	errs = append(errs, checkObservability(doc, root)...)
	errs = append(errs, checkTools(doc, root, stages, args)...)
	return errs
}

// checkObservability checks the observability profile: Prometheus scrapes
// every service's admin port with Sundial's rules loaded, and Grafana is
// provisioned with the Prometheus data source and the dashboards, from
// files that exist.
func checkObservability(doc composeFile, root string) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	prom, ok := doc.Services["prometheus"]
	if !ok {
		return []error{fmt.Errorf("service prometheus (profile observability) is missing")}
	}
	graf, ok := doc.Services["grafana"]
	if !ok {
		return []error{fmt.Errorf("service grafana (profile observability) is missing")}
	}
	for name, s := range map[string]composeService{"prometheus": prom, "grafana": graf} {
		if !slices.Contains(s.Profiles, "observability") {
			bad("%s: not in the observability profile (profiles %v)", name, s.Profiles)
		}
	}
	// mounts: container path -> host path, each host path must exist
	mounts := func(name string, s composeService) map[string]string {
		m := map[string]string{}
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 || !strings.HasPrefix(parts[0], "./") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, parts[0])); err != nil {
				bad("%s: mounts %s, which does not exist", name, parts[0])
			}
			m[parts[1]] = parts[0]
		}
		return m
	}
	pm := mounts("prometheus", prom)
	cfgHost, ok := pm["/etc/prometheus/prometheus.yml"]
	if !ok {
		bad("prometheus: /etc/prometheus/prometheus.yml is not mounted from the repository")
	} else if raw, err := os.ReadFile(filepath.Join(root, cfgHost)); err == nil {
		var cfg struct {
			RuleFiles     []string `yaml:"rule_files"`
			ScrapeConfigs []struct {
				StaticConfigs []struct {
					Targets []string `yaml:"targets"`
				} `yaml:"static_configs"`
			} `yaml:"scrape_configs"`
		}
		if err := yaml.Unmarshal(raw, &cfg); err != nil {
			bad("%s: %v", cfgHost, err)
		}
		var targets []string
		for _, sc := range cfg.ScrapeConfigs {
			for _, st := range sc.StaticConfigs {
				targets = append(targets, st.Targets...)
			}
		}
		for name, want := range composeSundial {
			if !slices.Contains(targets, name+":"+want.admin) {
				bad("prometheus: %s does not scrape %s:%s (targets %v)", cfgHost, name, want.admin, targets)
			}
		}
		if len(cfg.RuleFiles) == 0 {
			bad("prometheus: %s loads no rule files", cfgHost)
		}
		for _, rf := range cfg.RuleFiles {
			// rule_files are relative to the configuration file, in the container.
			inContainer := filepath.Join("/etc/prometheus", rf)
			found := false
			for target, host := range pm {
				if rel, err := filepath.Rel(target, inContainer); err == nil && !strings.HasPrefix(rel, "..") {
					if _, err := os.Stat(filepath.Join(root, host, rel)); err == nil {
						found = true
					}
				}
			}
			if !found {
				bad("prometheus: rule file %s is not mounted from an existing file", rf)
			}
		}
	}
	gm := mounts("grafana", graf)
	if _, ok := gm["/etc/grafana/provisioning"]; !ok {
		bad("grafana: /etc/grafana/provisioning is not mounted (deploy/grafana/provisioning)")
	}
	dashDir := graf.Environment["SUNDIAL_DASHBOARDS_DIR"]
	if host, ok := gm[dashDir]; !ok || dashDir == "" {
		bad("grafana: SUNDIAL_DASHBOARDS_DIR=%q is not a mounted folder", dashDir)
	} else if js, _ := filepath.Glob(filepath.Join(root, host, "*.json")); len(js) == 0 {
		bad("grafana: %s holds no dashboards", host)
	}
	if u := graf.Environment["SUNDIAL_PROMETHEUS_URL"]; u != "http://prometheus:9090" {
		bad("grafana: SUNDIAL_PROMETHEUS_URL=%q, want http://prometheus:9090", u)
	}
	// The provisioning files read these variables; each must be set.
	for _, f := range []string{"datasources/prometheus.yml", "dashboards/sundial.yml"} {
		raw, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "provisioning", f))
		if err != nil {
			bad("grafana provisioning: %v", err)
			continue
		}
		for _, m := range regexp.MustCompile(`\$\{?([A-Z_][A-Z0-9_]*)`).FindAllStringSubmatch(string(raw), -1) {
			if _, ok := graf.Environment[m[1]]; !ok {
				bad("grafana: provisioning %s reads $%s, which the service does not set", f, m[1])
			}
		}
	}
	return errs
}

// checkTools checks the tools profile's schedctl image.
func checkTools(doc composeFile, root string, stages, args []string) []error {
	s, ok := doc.Services["schedctl"]
	if !ok {
		return []error{fmt.Errorf("service schedctl (profile tools) is missing")}
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if b := s.Build; b == nil || b.Args["SERVICE"] != "schedctl" || !slices.Contains(stages, b.Target) {
		bad("schedctl: must build a Dockerfile stage with SERVICE=schedctl")
	}
	if !slices.Contains(args, "SERVICE") {
		bad("Dockerfile declares no SERVICE argument")
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "schedctl", "main.go")); err != nil {
		bad("schedctl: no cmd/schedctl/main.go")
	}
	if !strings.HasPrefix(s.Environment["SUNDIAL_ADDR"], "api:") {
		bad("schedctl: SUNDIAL_ADDR=%q, want the api inside the network", s.Environment["SUNDIAL_ADDR"])
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
		"Prometheus on the api's host port": func(c composeFile) {
			s := c.Services["prometheus"]
			s.Ports = []string{"127.0.0.1:9090:9090"}
			c.Services["prometheus"] = s
		},
		"Grafana without its dashboards": func(c composeFile) {
			s := c.Services["grafana"]
			s.Volumes = s.Volumes[:1]
			c.Services["grafana"] = s
		},
		"Grafana's data source variable unset": func(c composeFile) {
			s := c.Services["grafana"]
			env := map[string]string{}
			for k, v := range s.Environment {
				if k != "SUNDIAL_PROMETHEUS_URL" {
					env[k] = v
				}
			}
			s.Environment = env
			c.Services["grafana"] = s
		},
		"Prometheus without its rules": func(c composeFile) {
			s := c.Services["prometheus"]
			s.Volumes = s.Volumes[:1]
			c.Services["prometheus"] = s
		},
		"Prometheus in no profile": func(c composeFile) {
			s := c.Services["prometheus"]
			s.Profiles = nil
			c.Services["prometheus"] = s
		},
	}
	for name, breakIt := range breakages {
		c := clone()
		breakIt(c)
		if errs := checkCompose(c, root, stages, args); len(errs) == 0 {
			t.Errorf("%s: the checks found nothing wrong", name)
		}
	}
	// one per missing component and service, plus prometheus (grafana is
	// not reached) and schedctl
	if errs := checkCompose(composeFile{}, root, stages, args); len(errs) != len(composeComponents)+len(composeSundial)+2 {
		t.Errorf("an empty file: %d complaints, want one per missing service: %v", len(errs), errs)
	}
}
