package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/cli.md from the command table and cli.md.tmpl")

var referencePage = filepath.Join("..", "..", "docs", "cli.md")

// TestCLIReference keeps docs/cli.md what the command table and
// cli.md.tmpl generate: a command or flag added, renamed or re-described
// without regenerating the page fails it, and so does an edit made to the
// page instead of the template. `go generate` (or `make cli-doc`) runs it
// with -update to rewrite the page.
func TestCLIReference(t *testing.T) {
	tmpl, err := os.ReadFile("cli.md.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	want, err := renderReference(string(tmpl), commands())
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(referencePage, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(referencePage)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) == want {
		return
	}
	g, w := strings.Split(string(got), "\n"), strings.Split(want, "\n")
	i := 0
	for i < len(g) && i < len(w) && g[i] == w[i] {
		i++
	}
	line := func(ls []string) string {
		if i < len(ls) {
			return ls[i]
		}
		return "(end of file)"
	}
	t.Fatalf("docs/cli.md is not what schedctl's command table and cmd/schedctl/cli.md.tmpl generate "+
		"(edit the template or the table, not the page, then run `make cli-doc`); first difference at line %d:\n"+
		"  docs/cli.md: %s\n  generated:   %s", i+1, line(g), line(w))
}

// The page documents every command with its flags, and refuses a template
// that leaves a command out, names one twice or names one that is not in
// the table.
func TestRenderReference(t *testing.T) {
	var tmpl strings.Builder
	tmpl.WriteString("# schedctl\n\n<!-- schedctl:commands -->\n\n## Connecting\n\n<!-- schedctl:connection-flags -->\n")
	for _, c := range commands() {
		tmpl.WriteString("\n## " + c.name + "\n\n<!-- schedctl:command " + c.name + " -->\n")
	}
	page, err := renderReference(tmpl.String(), commands())
	if err != nil {
		t.Fatal(err)
	}
	conn := connFlagNames()
	for _, c := range commands() {
		if !strings.Contains(page, "| [`"+c.name+"`](#"+anchor(c.name)+") | ") {
			t.Errorf("the commands table does not link %s", c.name)
		}
		if !strings.Contains(page, "```\nschedctl "+c.name+" "+c.usage+"\n```\n\n"+c.summary+"\n") {
			t.Errorf("no synopsis and summary of %s", c.name)
		}
		for _, f := range c.flags() {
			if !conn[f.Name] && !strings.Contains(page, "| `"+dashed(f.Name)) {
				t.Errorf("%s of %s is not in the page", dashed(f.Name), c.name)
			}
		}
	}
	for name := range conn {
		if !strings.Contains(page, "| `"+dashed(name)) {
			t.Errorf("connection flag %s is not in the page", dashed(name))
		}
	}

	missing := strings.Replace(tmpl.String(), "<!-- schedctl:command audit -->\n", "", 1)
	twice := tmpl.String() + "<!-- schedctl:command audit -->\n"
	unknown := tmpl.String() + "<!-- schedctl:command purge -->\n"
	typo := tmpl.String() + "<!-- schedctl:comands -->\n"
	for name, bad := range map[string]string{"missing": missing, "twice": twice, "unknown": unknown, "typo": typo} {
		if _, err := renderReference(bad, commands()); err == nil {
			t.Errorf("%s: a bad template rendered", name)
		}
	}
}
