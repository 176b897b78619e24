package deploytest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// metricNames returns the metric names a PromQL expression selects. It is a
// small scanner, not a parser: enough for the expressions we write (and it
// rejects unbalanced brackets), without pulling Prometheus's module into the
// workspace. Strings, label matchers ({...}), ranges ([...]) and the label
// lists of by/without/on/ignoring/group_left/group_right are skipped; an
// identifier followed by "(" is a function or an aggregation.
func metricNames(expr string) ([]string, error) {
	// Grafana's label_values(metric, label) names its metric first.
	if m := labelValuesRe.FindStringSubmatch(expr); m != nil {
		return []string{m[1]}, nil
	}
	var out []string
	s := []rune(expr)
	depth := map[rune]int{}
	closing := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string in %q", expr)
			}
			i = j + 1
		case c == '{' || c == '[':
			end := matching(s, i)
			if end < 0 {
				return nil, fmt.Errorf("unbalanced %c in %q", c, expr)
			}
			i = end + 1
		case c == '(':
			depth['(']++
			i++
		case c == ')' || c == ']' || c == '}':
			depth[closing[c]]--
			if depth[closing[c]] < 0 {
				return nil, fmt.Errorf("unbalanced %c in %q", c, expr)
			}
			i++
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') {
				i++
			}
		case c == '$':
			// a Grafana variable outside a string, such as $__rate_interval
			i++
			for i < len(s) && isIdent(s[i]) {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := string(s[i:j])
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\n' || s[k] == '\t') {
				k++
			}
			nextParen := k < len(s) && s[k] == '('
			switch {
			case labelListKeywords[word] && nextParen:
				end := matching(s, k)
				if end < 0 {
					return nil, fmt.Errorf("unbalanced ( after %s in %q", word, expr)
				}
				j = end + 1
			case keywords[strings.ToLower(word)] || nextParen:
			default:
				out = append(out, word)
			}
			i = j
		default:
			i++
		}
	}
	if depth['('] != 0 {
		return nil, fmt.Errorf("unbalanced ( in %q", expr)
	}
	return out, nil
}

var labelValuesRe = regexp.MustCompile(`^\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,`)

var labelListKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
	"on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true, "atan2": true,
	// aggregation operators, which may put by/without before their "("
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

func isIdentStart(r rune) bool {
	return r == '_' || r == ':' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
}

func isIdent(r rune) bool { return isIdentStart(r) || r >= '0' && r <= '9' }

// matching returns the index of the bracket closing s[i], or -1.
func matching(s []rune, i int) int {
	open := s[i]
	closeR := map[rune]rune{'(': ')', '[': ']', '{': '}'}[open]
	d := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"', '\'', '`':
			q := s[j]
			for j++; j < len(s) && s[j] != q; j++ {
				if s[j] == '\\' && q != '`' {
					j++
				}
			}
		case open:
			d++
		case closeR:
			d--
			if d == 0 {
				return j
			}
		}
	}
	return -1
}

func TestMetricNames(t *testing.T) {
	cases := map[string][]string{
		`sum by (outcome) (rate(sundial_worker_firings_total{priority=~"$priority"}[$__rate_interval]))`: {"sundial_worker_firings_total"},
		`histogram_quantile(0.99, sum by (le, op) (rate(x_bucket{op=~"exec|batch"}[5m])))`:               {"x_bucket"},
		`deriv(a:b:c[10m]) > 0 and a:b:c > 10000`:                                                        {"a:b:c", "a:b:c"},
		`sum(rate(a{outcome="error"}[5m])) / sum(rate(a[5m])) > 0.01`:                                    {"a", "a"},
		`time() - max by (group) (ts)`:                                                                   {"ts"},
		`sum(up) < 1 or absent(up)`:                                                                      {"up", "up"},
		`label_values(sundial_worker_firings_total, priority)`:                                           {"sundial_worker_firings_total"},
		`a * on (instance) group_left (version) b offset 5m`:                                             {"a", "b"},
		`max by (instance, state) (m{x="}{"}) > 0`:                                                       {"m"},
		"count(\n  metric_a\n) by (job)":                                                                 {"metric_a"},
		`1e-3 * metric_b`:                                                                                {"metric_b"},
	}
	for expr, want := range cases {
		got, err := metricNames(expr)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", expr, got, want)
		}
	}
	for _, bad := range []string{`sum(rate(a[5m])`, `a{b="c"`, `sum(a))`, `a{b="c}`} {
		if _, err := metricNames(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// query is one PromQL expression and where it comes from.
type query struct{ where, expr string }

// dashboardQueries returns every query of the committed dashboards,
// variables included.
func dashboardQueries(t testing.TB) []query {
	t.Helper()
	paths, err := filepath.Glob(repoPath(t, "deploy", "grafana", "dashboards", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no dashboards in deploy/grafana/dashboards (%v)", err)
	}
	var out []query
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
			Templating struct {
				List []struct {
					Name       string `json:"name"`
					Definition string `json:"definition"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, panel := range d.Panels {
			for _, tg := range panel.Targets {
				out = append(out, query{filepath.Base(p) + ": " + panel.Title, tg.Expr})
			}
		}
		for _, v := range d.Templating.List {
			if v.Definition != "" {
				out = append(out, query{filepath.Base(p) + ": variable " + v.Name, v.Definition})
			}
		}
	}
	return out
}

// rulesFile is the part of a Prometheus rules file the checks read.
type rulesFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadRules(t testing.TB) rulesFile {
	t.Helper()
	b, err := os.ReadFile(repoPath(t, "deploy", "prometheus", "rules", "sundial.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f rulesFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// ruleQueries returns the rules' expressions and the names they record.
func ruleQueries(t testing.TB) (qs []query, recorded map[string]bool) {
	t.Helper()
	recorded = map[string]bool{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if r.Record != "" {
				name = r.Record
				recorded[r.Record] = true
			}
			qs = append(qs, query{"rules " + g.Name + ": " + name, r.Expr})
		}
	}
	return qs, recorded
}

// queriedMetrics returns every metric the dashboards and rules select that
// a service must export: recorded names are Prometheus's own, and `up` is
// the scrape's.
func queriedMetrics(t testing.TB) map[string][]string {
	t.Helper()
	rq, recorded := ruleQueries(t)
	out := map[string][]string{}
	for _, q := range append(dashboardQueries(t), rq...) {
		names, err := metricNames(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		if len(names) == 0 && !strings.HasPrefix(q.expr, "time()") {
			t.Errorf("%s: selects no metric: %q", q.where, q.expr)
		}
		for _, n := range names {
			if recorded[n] || n == "up" {
				continue
			}
			out[n] = append(out[n], q.where)
		}
	}
	return out
}

// exportedName maps a series name to the metric family that exports it.
func exportedName(series string) []string {
	cands := []string{series}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suf); ok {
			cands = append(cands, base)
		}
	}
	return cands
}

// TestQueriedMetricsAreDeclared is the unit tier's cheap version of the
// integration test's check: each queried metric's family name appears as a
// string in the services' or pkg's Go code (or is one of the Go client's
// runtime and process collectors).
func TestQueriedMetricsAreDeclared(t *testing.T) {
	var src strings.Builder
	for _, dir := range []string{"services", "pkg"} {
		err := filepath.WalkDir(repoPath(t, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			src.Write(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	code := src.String()
	var missing []string
	for name, where := range queriedMetrics(t) {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue // client_golang's collectors, registered by pkg/process/admin.NewRegistry
		}
		found := false
		for _, c := range exportedName(name) {
			if strings.Contains(code, `"`+c+`"`) {
				found = true
			}
		}
		if !found {
			missing = append(missing, fmt.Sprintf("%s (queried by %s)", name, strings.Join(where, "; ")))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("no service declares %s", m)
	}
}
