package deploytest

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// valuesFiles are the chart's ci/*-values.yaml, by test name (the file name
// without -values.yaml): default, hpa, keda, tls, cluster.
func valuesFiles(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(repoPath(t, "deploy", "helm", "sundial", "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range paths {
		out[strings.TrimSuffix(filepath.Base(p), "-values.yaml")] = p
	}
	for _, want := range []string{"default", "keda", "hpa", "tls", "cluster"} {
		if _, ok := out[want]; !ok {
			t.Fatalf("deploy/helm/sundial/ci/%s-values.yaml is missing", want)
		}
	}
	return out
}

func chartDir(t testing.TB) string { return repoPath(t, "deploy", "helm", "sundial") }

func TestHelmLint(t *testing.T) {
	helm := tool(t, "helm", "helm")
	for name, values := range valuesFiles(t) {
		t.Run(name, func(t *testing.T) {
			run(t, chartDir(t), helm, "lint", "--strict", "--kube-version", kubeVersion, "-f", values, ".")
		})
	}
}

// TestHelmGolden renders every values file the way `make helm-golden` does
// and compares the files with the committed renders in deploy/helm/tests
// (Mimir's layout: one <name>-generated folder per values file, one file
// per template). A chart change shows up in review as a diff of what it
// renders.
func TestHelmGolden(t *testing.T) {
	helm := tool(t, "helm", "helm")
	goldenRoot := repoPath(t, "deploy", "helm", "tests")
	for name, values := range valuesFiles(t) {
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			run(t, chartDir(t), helm, "template", name, ".", "-f", values, "--namespace", "citest",
				"--kube-version", kubeVersion, "--output-dir", tmp)
			got := readTree(t, tmp)
			golden := filepath.Join(goldenRoot, name+"-generated")
			if *update {
				if err := os.RemoveAll(golden); err != nil {
					t.Fatal(err)
				}
				for rel, b := range got {
					p := filepath.Join(golden, rel)
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				return
			}
			want := readTree(t, golden)
			for rel, b := range got {
				w, ok := want[rel]
				switch {
				case !ok:
					t.Errorf("%s renders %s, which deploy/helm/tests/%s-generated lacks", name, rel, name)
				case !bytes.Equal(b, w):
					t.Errorf("%s: %s differs from the golden render:\n%s", name, rel, firstDiff(w, b))
				}
			}
			for rel := range want {
				if _, ok := got[rel]; !ok {
					t.Errorf("%s no longer renders %s", name, rel)
				}
			}
			if t.Failed() {
				t.Log("if the change is intended: make helm-golden, and commit deploy/helm/tests")
			}
		})
	}
}

func readTree(t *testing.T, root string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

// firstDiff shows the first differing line with a little context.
func firstDiff(want, got []byte) string {
	wl, gl := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("line %d\n  golden:   %q\n  rendered: %q", i+1, w, g)
		}
	}
	return "(only trailing bytes differ)"
}

// object is one rendered Kubernetes object, navigated loosely.
type object map[string]any

func (o object) kind() string { return str(o["kind"]) }
func (o object) name() string { return str(dig(o, "metadata", "name")) }

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			if o, ok2 := v.(object); ok2 {
				m = o
			} else {
				return nil
			}
		}
		v = m[p]
	}
	return v
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// render runs helm template with extra --set flags and parses the objects.
func render(t *testing.T, values string, set ...string) ([]object, error) {
	t.Helper()
	helm := tool(t, "helm", "helm")
	args := []string{"template", "t", ".", "--namespace", "citest", "--kube-version", kubeVersion}
	if values != "" {
		args = append(args, "-f", values)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := runErr(chartDir(t), helm, args...)
	if err != nil {
		return nil, err
	}
	return parseObjects(t, out), nil
}

func parseObjects(t *testing.T, b []byte) []object {
	t.Helper()
	var objs []object
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("rendered YAML does not parse: %v", err)
		}
		if m != nil {
			objs = append(objs, object(m))
		}
	}
	return objs
}

func byKind(objs []object, kind string) []object {
	var out []object
	for _, o := range objs {
		if o.kind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func find(objs []object, kind, suffix string) object {
	for _, o := range objs {
		if o.kind() == kind && strings.HasSuffix(o.name(), suffix) {
			return o
		}
	}
	return nil
}

var services = []string{"api", "prefetcher", "relay", "worker"}

// TestChartInvariants checks, for every values file, what must hold
// whatever the values: the properties reviewers would otherwise have to
// re-check by eye on every golden diff.
func TestChartInvariants(t *testing.T) {
	for name, values := range valuesFiles(t) {
		t.Run(name, func(t *testing.T) {
			objs, err := render(t, values)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, name, objs)
		})
	}
}

func checkInvariants(t *testing.T, name string, objs []object) {
	t.Helper()
	secretValues := secretValuesOf(objs)
	for _, cm := range byKind(objs, "ConfigMap") {
		checkConfigMapHasNoSecrets(t, cm, secretValues)
	}
	serviceMonitors := len(byKind(objs, "ServiceMonitor")) > 0
	for _, svc := range services {
		dep := find(objs, "Deployment", "-"+svc)
		if dep == nil {
			t.Errorf("no Deployment for %s", svc)
			continue
		}
		podLabels, _ := dig(dep, "spec", "template", "metadata", "labels").(map[string]any)
		cm := find(objs, "ConfigMap", "-"+svc)
		if cm == nil {
			t.Errorf("%s: no ConfigMap", svc)
			continue
		}
		data, _ := dig(cm, "data").(map[string]any)
		checkDeployment(t, svc, dep, data)
		checkFilesAreMounted(t, svc, dig(dep, "spec", "template", "spec"), data)

		pdb := find(objs, "PodDisruptionBudget", "-"+svc)
		if pdb == nil {
			t.Errorf("%s: no PodDisruptionBudget", svc)
		} else if !selects(dig(pdb, "spec", "selector", "matchLabels"), podLabels) {
			t.Errorf("%s: the PodDisruptionBudget does not select the Deployment's pods", svc)
		}
		s := find(objs, "Service", "-"+svc)
		if s == nil {
			t.Errorf("%s: no Service", svc)
		} else if !selects(dig(s, "spec", "selector"), podLabels) {
			t.Errorf("%s: the Service does not select the Deployment's pods", svc)
		}
		if serviceMonitors {
			sm := find(objs, "ServiceMonitor", "-"+svc)
			switch {
			case sm == nil:
				t.Errorf("%s: ServiceMonitors are on but %s has none", name, svc)
			case s != nil && !selects(dig(sm, "spec", "selector", "matchLabels"), dig(s, "metadata", "labels").(map[string]any)):
				t.Errorf("%s: the ServiceMonitor does not select the Service", svc)
			}
		}
	}
	for _, svc := range []string{"prefetcher", "relay"} {
		if dep := find(objs, "Deployment", "-"+svc); dep != nil {
			if n, _ := dig(dep, "spec", "replicas").(int); n < 2 {
				t.Errorf("%s: %d replicas; a standby (prefetcher) or a second active relay needs at least 2", svc, n)
			}
		}
	}
	for _, job := range byKind(objs, "Job") {
		checkFilesAreMounted(t, "Job "+job.name(), dig(job, "spec", "template", "spec"), nil)
	}
	checkAutoscaling(t, name, objs)
}

// secretValuesOf returns every value stored in a rendered Secret, decoded.
func secretValuesOf(objs []object) []string {
	var out []string
	for _, s := range byKind(objs, "Secret") {
		for _, v := range mapOf(dig(s, "data")) {
			if b, err := decodeB64(str(v)); err == nil && len(b) > 0 {
				out = append(out, string(b))
			}
		}
		for _, v := range mapOf(dig(s, "stringData")) {
			out = append(out, str(v))
		}
	}
	return out
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func checkConfigMapHasNoSecrets(t *testing.T, cm object, secretValues []string) {
	t.Helper()
	if strings.Contains(cm.name(), "-dashboard-") {
		return // Grafana JSON: no settings, and no secrets by construction
	}
	for k, v := range mapOf(dig(cm, "data")) {
		s := str(v)
		lk := strings.ToLower(k)
		switch settingKind(k) {
		case credentialSetting:
			t.Errorf("ConfigMap %s holds %s: secret settings belong in a Secret", cm.name(), k)
		case pathSetting:
			// The value names a file or directory (checkFilesAreMounted
			// checks it is mounted); anything else in it is a value
			// passed off as a path.
			if !strings.HasPrefix(s, "/") || strings.ContainsAny(s, " \t\n") {
				t.Errorf("ConfigMap %s: %s=%q is not an absolute path", cm.name(), k, s)
			}
		}
		for _, sv := range secretValues {
			if strings.Contains(s, sv) {
				t.Errorf("ConfigMap %s: %s contains a value of the Secret", cm.name(), k)
			}
		}
		if strings.Contains(lk, "dsn") && dsnHasPassword(s) {
			t.Errorf("ConfigMap %s: %s carries a password", cm.name(), k)
		}
	}
}

// What a setting's value is, by the head noun of its name: flags are named
// for what they hold, last word last (redis-password, signing-secret,
// tokens; secrets-dir, redis-password-file; idempotency-key-ttl). So
// SUNDIAL_SECRETS_DIR is a directory and SUNDIAL_SIGNING_SECRET a secret,
// though both contain "secret": the word decides only where it is the
// head. Postgres DSNs are checked by value (dsnHasPassword), and every
// value of a rendered Secret by secretValues.
type kind int

const (
	plainSetting      kind = iota
	credentialSetting      // its value is a secret: it comes from a Secret (secretKeyRef) or a mounted file
	pathSetting            // its value names a file or directory, which may hold a secret
)

func settingKind(env string) kind {
	words := strings.Split(strings.ToLower(strings.TrimPrefix(env, "SUNDIAL_")), "_")
	switch words[len(words)-1] {
	case "file", "dir", "path":
		return pathSetting
	case "secret", "secrets", "token", "tokens", "password", "passwd", "key", "keys", "kek", "credentials":
		return credentialSetting
	}
	return plainSetting
}

// dsnHasPassword reports a URL DSN with user:password@ or a password= parameter.
func dsnHasPassword(dsn string) bool {
	if strings.Contains(dsn, "password=") {
		return true
	}
	rest, ok := strings.CutPrefix(dsn, "postgres://")
	if !ok {
		rest, ok = strings.CutPrefix(dsn, "postgresql://")
	}
	if !ok {
		return false
	}
	userinfo, _, found := strings.Cut(rest, "@")
	return found && strings.Contains(userinfo, ":")
}

// secretMountRoot is where the chart mounts Secrets as files: TLS material
// under tls/<component>/, passwords under credentials/<component>/.
const secretMountRoot = "/etc/sundial/"

// checkFilesAreMounted: every file under secretMountRoot that a container
// is told to read (a SUNDIAL_* setting of its ConfigMap or a literal env
// entry) lies under one of its volume mounts, and is a key of the Secret
// mounted there when the volume lists its items. A path to nowhere would
// only show when the pod fails to start.
func checkFilesAreMounted(t *testing.T, who string, podSpec any, settings map[string]any) {
	t.Helper()
	for _, p := range unmountedFiles(podSpec, settings) {
		t.Errorf("%s: %s", who, p)
	}
}

func unmountedFiles(podSpec any, settings map[string]any) []string {
	var problems []string
	volumes := map[string]any{}
	for _, v := range list(dig(podSpec, "volumes")) {
		volumes[str(dig(v, "name"))] = v
	}
	for _, c := range list(dig(podSpec, "containers")) {
		all := map[string]string{}
		for k, v := range settings {
			all[k] = str(v)
		}
		for _, e := range list(dig(c, "env")) {
			if v := dig(e, "value"); v != nil {
				all[str(dig(e, "name"))] = str(v)
			}
		}
		for name, path := range all {
			if !strings.HasPrefix(path, secretMountRoot) || !strings.HasPrefix(name, "SUNDIAL_") {
				continue
			}
			mounted := false
			for _, m := range list(dig(c, "volumeMounts")) {
				dir := strings.TrimSuffix(str(dig(m, "mountPath")), "/") + "/"
				rel, ok := strings.CutPrefix(path, dir)
				if !ok {
					continue
				}
				mounted = true
				vol := volumes[str(dig(m, "name"))]
				if dig(vol, "secret") == nil {
					problems = append(problems, fmt.Sprintf("%s=%s is under %s, which is not a Secret volume", name, path, dir))
				}
				if items := list(dig(vol, "secret", "items")); len(items) > 0 {
					found := false
					for _, it := range items {
						found = found || str(dig(it, "path")) == rel
					}
					if !found {
						problems = append(problems, fmt.Sprintf("%s=%s, but the Secret volume at %s holds no %s", name, path, dir, rel))
					}
				}
			}
			if !mounted && settingKind(name) == pathSetting && strings.HasSuffix(name, "_DIR") {
				p, ok := secretParent(c, volumes, path)
				problems = append(problems, p...)
				mounted = ok
			}
			if !mounted {
				problems = append(problems, fmt.Sprintf("%s=%s, but nothing is mounted there", name, path))
			}
		}
	}
	return problems
}

// secretParent checks a directory setting whose entries are Secret mounts
// of their own (the target secrets: <dir>/<tenant>/ per tenant): it holds
// at least one mount, and each mount under it is a Secret volume exactly
// one level down, where the service looks.
func secretParent(container any, volumes map[string]any, dir string) (problems []string, ok bool) {
	dir = strings.TrimSuffix(dir, "/") + "/"
	for _, m := range list(dig(container, "volumeMounts")) {
		mp := str(dig(m, "mountPath"))
		rel, under := strings.CutPrefix(strings.TrimSuffix(mp, "/"), dir)
		if !under {
			continue
		}
		ok = true
		if rel == "" || strings.Contains(rel, "/") {
			problems = append(problems, fmt.Sprintf("%s is mounted at %s, not one level under %s", str(dig(m, "name")), mp, dir))
		}
		if dig(volumes[str(dig(m, "name"))], "secret") == nil {
			problems = append(problems, fmt.Sprintf("%s under %s is not a Secret volume", mp, dir))
		}
	}
	return problems, ok
}

func selects(selector any, labels map[string]any) bool {
	sel := mapOf(selector)
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if str(labels[k]) != str(v) {
			return false
		}
	}
	return true
}

func checkDeployment(t *testing.T, svc string, dep object, config map[string]any) {
	t.Helper()
	spec := dig(dep, "spec", "template", "spec")
	containers := list(dig(spec, "containers"))
	if len(containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", svc, len(containers))
	}
	c := containers[0]
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		got := str(dig(c, probe, "httpGet", "path"))
		port := str(dig(c, probe, "httpGet", "port"))
		if got != path || port != "admin" {
			t.Errorf("%s: %s is %s on port %q, want %s on the admin port", svc, probe, got, port, path)
		}
	}
	var adminPort string
	for _, p := range list(dig(c, "ports")) {
		if str(dig(p, "name")) == "admin" {
			adminPort = str(dig(p, "containerPort"))
		}
	}
	if want := "0.0.0.0:" + adminPort; str(config["SUNDIAL_ADMIN_ADDR"]) != want {
		t.Errorf("%s: SUNDIAL_ADMIN_ADDR=%v, want %s (the probed port)", svc, config["SUNDIAL_ADMIN_ADDR"], want)
	}
	// The kubelet must not SIGKILL a service that is still draining.
	drain, err := time.ParseDuration(str(config["SUNDIAL_DRAIN_TIMEOUT"]))
	if err != nil {
		t.Errorf("%s: SUNDIAL_DRAIN_TIMEOUT %q: %v", svc, config["SUNDIAL_DRAIN_TIMEOUT"], err)
	}
	var preStop time.Duration
	if cmd := list(dig(c, "lifecycle", "preStop", "exec", "command")); len(cmd) == 2 && str(cmd[0]) == "sleep" {
		n, _ := strconv.Atoi(str(cmd[1]))
		preStop = time.Duration(n) * time.Second
	}
	grace, _ := dig(spec, "terminationGracePeriodSeconds").(int)
	if need := preStop + drain + 5*time.Second; time.Duration(grace)*time.Second < need {
		t.Errorf("%s: terminationGracePeriodSeconds %d < preStop %s + drain %s + 5s margin", svc, grace, preStop, drain)
	}
	// Secrets reach the process only through secretKeyRef env entries.
	env := map[string]any{}
	for _, e := range list(dig(c, "env")) {
		env[str(dig(e, "name"))] = e
		if v := dig(e, "value"); v != nil {
			if settingKind(str(dig(e, "name"))) == credentialSetting {
				t.Errorf("%s: env %s has a literal value", svc, str(dig(e, "name")))
			}
		}
	}
	wantSecret := map[string][]string{"worker": {"SUNDIAL_SIGNING_SECRET"}}[svc]
	if svc == "api" {
		// The bootstrap tokens: a file of hashes mounted from the Secret
		// as a directory (a subPath mount would never see an update).
		if want := "/etc/sundial/api-tokens/tokens.yaml"; str(config["SUNDIAL_TOKENS_FILE"]) != want {
			t.Errorf("api: SUNDIAL_TOKENS_FILE=%v, want %s", config["SUNDIAL_TOKENS_FILE"], want)
		}
		if _, ok := env["SUNDIAL_TOKENS"]; ok {
			t.Errorf("api: SUNDIAL_TOKENS (plain tokens) is set")
		}
		mounted := false
		for _, m := range list(dig(c, "volumeMounts")) {
			if str(dig(m, "name")) == "api-tokens" && str(dig(m, "mountPath")) == "/etc/sundial/api-tokens" && dig(m, "subPath") == nil {
				mounted = true
			}
		}
		for _, v := range list(dig(spec, "volumes")) {
			if str(dig(v, "name")) == "api-tokens" && (dig(v, "secret", "secretName") == nil || str(dig(list(dig(v, "secret", "items"))[0], "path")) != "tokens.yaml") {
				mounted = false
			}
		}
		if !mounted {
			t.Errorf("api: the tokens file is not mounted from the Secret at /etc/sundial/api-tokens")
		}
	}
	for _, name := range wantSecret {
		if dig(env[name], "valueFrom", "secretKeyRef", "name") == nil {
			t.Errorf("%s: %s does not come from a Secret", svc, name)
		}
	}
	if _, inCM := config["SUNDIAL_POSTGRES_DSN"]; !inCM && dig(env["SUNDIAL_POSTGRES_DSN"], "valueFrom", "secretKeyRef") == nil {
		t.Errorf("%s: no Postgres DSN, neither in the ConfigMap nor from a Secret", svc)
	}
	if str(dig(c, "envFrom")) == "" {
		t.Errorf("%s: the container does not read its ConfigMap", svc)
	}
}

func checkAutoscaling(t *testing.T, name string, objs []object) {
	t.Helper()
	dep := find(objs, "Deployment", "-worker")
	cm := find(objs, "ConfigMap", "-worker")
	if dep == nil || cm == nil {
		return
	}
	group := str(dig(cm, "data", "SUNDIAL_GROUP"))
	prefix := str(dig(cm, "data", "SUNDIAL_TOPIC_PREFIX"))
	scaled := byKind(objs, "ScaledObject")
	hpas := byKind(objs, "HorizontalPodAutoscaler")
	_, hasReplicas := mapOf(dig(dep, "spec"))["replicas"]
	mode, signal := autoscalingOf(t, name)
	if signal == "due" && mode != "none" {
		checkDueAutoscaling(t, name, mode, group, dep, scaled, hpas, hasReplicas)
		return
	}
	switch mode {
	case "none":
		if len(scaled)+len(hpas) != 0 || !hasReplicas {
			t.Errorf("%s: autoscaling none wants a fixed replica count and no autoscaler", name)
		}
	case "keda":
		if len(scaled) != 1 || len(hpas) != 0 || hasReplicas {
			t.Fatalf("%s: want one ScaledObject, no HPA, and no replicas on the Deployment (got %d, %d, %v)", name, len(scaled), len(hpas), hasReplicas)
		}
		so := scaled[0]
		if str(dig(so, "spec", "scaleTargetRef", "name")) != dep.name() {
			t.Errorf("the ScaledObject scales %v, not the worker Deployment", dig(so, "spec", "scaleTargetRef", "name"))
		}
		var topics []string
		for _, tr := range list(dig(so, "spec", "triggers")) {
			if str(dig(tr, "type")) != "kafka" {
				t.Errorf("trigger type %v, want kafka", dig(tr, "type"))
			}
			if g := str(dig(tr, "metadata", "consumerGroup")); g != group {
				t.Errorf("trigger watches group %q, the workers are in %q", g, group)
			}
			if _, err := strconv.Atoi(str(dig(tr, "metadata", "lagThreshold"))); err != nil {
				t.Errorf("lagThreshold %v is not a number", dig(tr, "metadata", "lagThreshold"))
			}
			topics = append(topics, str(dig(tr, "metadata", "topic")))
		}
		slices.Sort(topics)
		want := []string{prefix + ".fire.critical", prefix + ".fire.high", prefix + ".fire.low", prefix + ".fire.medium"}
		if !slices.Equal(topics, want) {
			t.Errorf("triggers watch %v, want the four priority topics %v", topics, want)
		}
	case "hpa":
		if len(hpas) != 1 || len(scaled) != 0 || hasReplicas {
			t.Fatalf("%s: want one HPA, no ScaledObject, and no replicas on the Deployment", name)
		}
		h := hpas[0]
		if str(dig(h, "spec", "scaleTargetRef", "name")) != dep.name() {
			t.Errorf("the HPA scales %v, not the worker Deployment", dig(h, "spec", "scaleTargetRef", "name"))
		}
		metrics := list(dig(h, "spec", "metrics"))
		if len(metrics) != 1 || str(dig(metrics[0], "type")) != "External" {
			t.Fatalf("HPA metrics %v: want one External metric", metrics)
		}
		if m := str(dig(metrics[0], "external", "metric", "name")); m != lagMetric {
			t.Errorf("HPA reads %s, want %s (the workers' lag metric)", m, lagMetric)
		}
		if g := str(dig(metrics[0], "external", "metric", "selector", "matchLabels", "group")); g != group {
			t.Errorf("HPA selects group %q, the workers are in %q", g, group)
		}
	}
}

// lagMetric is the consumer-lag metric every worker exports (and the
// dashboards, alerts and the HPA read).
const lagMetric = "sundial_worker_group_lag_records"

// The chart must refuse settings the services cannot honour, loudly.
func TestChartRefusesWhatItCannotDo(t *testing.T) {
	def := valuesFiles(t)["default"]
	cases := map[string][]string{
		"a client certificate without a Secret":                     {"tls.redis.enabled=true", "tls.redis.clientCert=true"},
		"a Redis user without a Secret":                             {"redis.auth.username=sundial"},
		"a Cassandra Secret without a user":                         {"cassandra.auth.existingSecret=cass"},
		"a ZooKeeper user without a Secret":                         {"zookeeper.auth.existingSecret="},
		"an unknown SASL mechanism":                                 {"kafka.sasl.mechanism=GSSAPI", "kafka.sasl.username=u", "kafka.sasl.existingSecret=k"},
		"a SASL mechanism without a Secret":                         {"kafka.sasl.mechanism=PLAIN", "kafka.sasl.username=u"},
		"a SASL user without a mechanism":                           {"kafka.sasl.username=u", "kafka.sasl.existingSecret=k"},
		"KEDA against SASL brokers without a TriggerAuthentication": {"autoscaling.mode=keda", "autoscaling.signal=lag", "kafka.sasl.mechanism=PLAIN", "kafka.sasl.username=u", "kafka.sasl.existingSecret=k"},
		"KEDA on the due backlog without a Prometheus":              {"autoscaling.mode=keda"},
		"an unknown autoscaling signal":                             {"autoscaling.mode=hpa", "autoscaling.signal=cpu"},
		"postgres TLS without a Secret":                             {"tls.postgres.enabled=true", "postgres.sslmode=verify-full"},
		"postgres TLS with sslmode=disable":                         {"tls.postgres.enabled=true", "tls.postgres.existingSecret=x"},
		"an unknown autoscaling mode":                               {"autoscaling.mode=vpa"},
		"a secret passed as a flag":                                 {"worker.flags.signing-secret=oops"},
		"no api tokens and no existing Secret":                      {"secrets.create.apiTokens="},
	}
	// The api's TLS and the target secrets: each refused by its own check,
	// whose message names the value to fix.
	named := map[string]struct {
		set  []string
		want string
	}{
		"api TLS without a certificate Secret":                    {[]string{"api.tls.existingSecret="}, "api.tls.existingSecret:"},
		"no ZooKeeper identity for the prefetchers":               {[]string{"zookeeper.auth.username=", "zookeeper.auth.existingSecret="}, "zookeeper.auth.username:"},
		"api TLS older than 1.2":                                  {[]string{"api.tls.minVersion=1.1"}, "api.tls.minVersion:"},
		"client certificates on a plaintext api":                  {[]string{"api.tls.enabled=false", "api.tls.clientCA.existingSecret=clients"}, "api.tls.clientCA:"},
		"client certificates on the HTTP port without client CAs": {[]string{"api.tls.clientCA.http=true"}, "api.tls.clientCA.http:"},
		"a tenant's target secrets without a Secret":              {[]string{"targetSecrets.tenants.acme="}, "targetSecrets.tenants.acme:"},
		"no key-encryption key for the tenants' signing keys":     {[]string{"signingKeys.kekSecret.existingSecret="}, "signingKeys.kekSecret.existingSecret:"},
		"a tenant name with a path separator":                     {[]string{"targetSecrets.tenants.a/b=sundial-target-secrets"}, `"a/b" is not a tenant name`},
		"a tenant name that climbs out of the directory":          {[]string{"targetSecrets.tenants.\\.\\.=sundial-target-secrets"}, `".." is not a tenant name`},
		"an empty postgres.hosts entry":                           {[]string{"postgres.hosts[0]=pg-0.pg:5432", "postgres.hosts[1]="}, "postgres.hosts[1]:"},
		"a postgres.hosts entry without a port":                   {[]string{"postgres.hosts={pg-0.pg:5432,pg-1.pg}"}, "postgres.hosts[1]:"},
		"postgres.hosts as one comma-separated string":            {[]string{"postgres.hosts=pg-0.pg:5432"}, "postgres.hosts:"},
		"a Postgres session on a standby":                         {[]string{"postgres.hosts={pg-0.pg:5432,pg-1.pg:5432}", "postgres.params.target_session_attrs=prefer-standby"}, "postgres.params.target_session_attrs:"},
	}
	for name, set := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := render(t, def, set...); err == nil {
				t.Errorf("rendered with %v; want a failure", set)
			}
		})
	}
	for name, c := range named {
		t.Run(name, func(t *testing.T) {
			_, err := render(t, def, c.set...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("rendered with %v: %v; want a failure naming %s", c.set, err, c.want)
			}
		})
	}
	// Open ZooKeeper ACLs render only when the values spell them out.
	if _, err := render(t, def, "zookeeper.auth.username=", "zookeeper.auth.existingSecret=", "zookeeper.openACL=true"); err != nil {
		t.Errorf("zookeeper.openACL=true without an identity: %v", err)
	}
	// And the checks above must catch a secret in a ConfigMap.
	objs, err := render(t, def, "api.flags.grpc-stop-timeout=ci-password")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cm := range byKind(objs, "ConfigMap") {
		for _, v := range mapOf(dig(cm, "data")) {
			for _, sv := range secretValuesOf(objs) {
				if strings.Contains(str(v), sv) {
					found = true
				}
			}
		}
	}
	if !found {
		t.Error("a Secret value copied into a ConfigMap went unnoticed")
	}
	if !dsnHasPassword("postgres://u:p@h/db") || dsnHasPassword("postgres://u@h/db?sslmode=disable") {
		t.Error("dsnHasPassword is wrong")
	}
	// And a file setting pointing where nothing is mounted.
	objs, err = render(t, def, "api.flags.redis-tls-ca-file=/etc/sundial/tls/redis/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	api := find(objs, "Deployment", "-api")
	data, _ := dig(find(objs, "ConfigMap", "-api"), "data").(map[string]any)
	if len(unmountedFiles(dig(api, "spec", "template", "spec"), data)) == 0 {
		t.Error("a file setting with nothing mounted at its path went unnoticed")
	}
	// And a directory setting whose per-tenant mounts are not Secrets, or
	// not where the service looks.
	volumes := []any{
		map[string]any{"name": "t0", "secret": map[string]any{"secretName": "s"}},
		map[string]any{"name": "t1", "emptyDir": map[string]any{}},
	}
	pod := func(mounts ...string) any {
		var ms []any
		for i, mp := range mounts {
			ms = append(ms, map[string]any{"name": fmt.Sprintf("t%d", i), "mountPath": mp})
		}
		return map[string]any{"volumes": volumes, "containers": []any{map[string]any{"volumeMounts": ms}}}
	}
	dirSetting := map[string]any{"SUNDIAL_SECRETS_DIR": "/etc/sundial/target-secrets"}
	if p := unmountedFiles(pod("/etc/sundial/target-secrets/acme"), dirSetting); len(p) != 0 {
		t.Errorf("a directory of per-tenant Secret mounts refused: %v", p)
	}
	for what, mounts := range map[string][]string{
		"nothing under it":          {"/etc/sundial/elsewhere/acme"},
		"a mount that is no Secret": {"/etc/sundial/target-secrets/acme", "/etc/sundial/target-secrets/beta"},
		"a mount two levels down":   {"/etc/sundial/target-secrets/acme/x"},
	} {
		if len(unmountedFiles(pod(mounts...), dirSetting)) == 0 {
			t.Errorf("a secrets directory with %s went unnoticed", what)
		}
	}
	for env, want := range map[string]kind{
		"SUNDIAL_SECRETS_DIR": pathSetting, "SUNDIAL_SIGNING_SECRET": credentialSetting, "SUNDIAL_TOKENS": credentialSetting,
		"SUNDIAL_REDIS_PASSWORD": credentialSetting, "SUNDIAL_REDIS_PASSWORD_FILE": pathSetting,
		"SUNDIAL_SIGNING_KEY_ENCRYPTION_KEY_FILE": pathSetting, "SUNDIAL_IDEMPOTENCY_KEY_TTL": plainSetting,
		"SUNDIAL_TOKENS_FILE": pathSetting, "SUNDIAL_REDIS_KEY_PREFIX": plainSetting,
		"SUNDIAL_CONSOLE_SESSION_KEY_FILE": pathSetting, "SUNDIAL_SESSION_KEY": credentialSetting,
	} {
		if got := settingKind(env); got != want {
			t.Errorf("settingKind(%s) = %d, want %d", env, got, want)
		}
	}
}

func decodeB64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
