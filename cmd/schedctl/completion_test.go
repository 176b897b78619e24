package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// completionCase is a command line being completed (the last word is the
// one under the cursor) and the words the script should offer for it.
type completionCase struct {
	words []string
	want  []string
}

// completionCases are what a user types: every command, every command's
// flags, a group's subcommands, positional words, and a flag's value.
func completionCases(t *testing.T) []completionCase {
	t.Helper()
	tree, err := buildTree(commands())
	if err != nil {
		t.Fatal(err)
	}
	cases := []completionCase{
		{[]string{""}, append([]string{"help"}, tree.top...)},
		{[]string{"help", ""}, tree.top},
		{[]string{"s"}, []string{"server-preview", "signing-key", "sink"}},
		{[]string{"dlq", ""}, []string{"list", "show", "redrive"}},
		{[]string{"dlq", "re"}, []string{"redrive"}},
		{[]string{"help", "dlq", "s"}, []string{"show"}},
		{[]string{"completion", ""}, []string{"bash", "zsh"}},
		{[]string{"create", "--name", "x", "--pri"}, []string{"--priority"}},
		{[]string{"list", "--all", "--page-"}, []string{"--page-size", "--page-token"}},
		{[]string{"get", "J1", "-o"}, []string{"-o"}},
		{[]string{"frobnicate", "-"}, nil},
		// A flag's value is a file name, as far as completion knows; a
		// flag without one (--all) is followed by more flags.
		{[]string{"create", "-f", ""}, []string{filesMarker}},
		{[]string{"dlq", "redrive", "--since", "-"}, []string{filesMarker}},
		{[]string{"list", "--all", "--st"}, []string{"--status"}},
		{[]string{"get", ""}, nil},
		// Enumerated values complete to their words.
		{[]string{"create", "--priority", ""}, []string{"CRITICAL", "HIGH", "MEDIUM", "LOW"}},
		{[]string{"update", "J1", "--backoff", "EXP"}, []string{"EXPONENTIAL", "EXPONENTIAL_WITH_JITTER"}},
		{[]string{"get", "J1", "-o", ""}, []string{"table", "json"}},
		{[]string{"dlq", "list", "--output", "j"}, []string{"json"}},
		{[]string{"list", "--status", "p"}, []string{"paused"}},
		{[]string{"preview", "--dst-gap", ""}, []string{"SHIFT", "SKIP"}},
	}
	// Every command offers every flag it takes, and nothing else.
	for _, cc := range tree.cmds {
		var want []string
		for _, f := range cc.flags {
			want = append(want, dashed(f.Name))
		}
		cases = append(cases, completionCase{append(strings.Fields(cc.c.name), "-"), want})
	}
	return cases
}

// filesMarker stands for "complete file names" in the cases: the scripts
// hand that to the shell (compopt -o default, _files), which the tests
// replace with functions that print it.
const filesMarker = "(files)"

// shellRun runs script with the shell and returns its standard output.
func shellRun(t *testing.T, shell, script string) string {
	t.Helper()
	path, err := exec.LookPath(shell)
	if err != nil {
		t.Fatalf("%s is needed to test its completion script: %v", shell, err)
	}
	file := filepath.Join(t.TempDir(), "test."+shell)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(path, "-c", script, file)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", shell, err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Fatalf("%s wrote to stderr:\n%s", shell, stderr.String())
	}
	return stdout.String()
}

func completionScript(t *testing.T, shell string) string {
	t.Helper()
	code, out, stderr := cli(t, time.Now(), "completion", shell)
	if code != 0 || stderr != "" {
		t.Fatalf("schedctl completion %s: exit %d, stderr %q", shell, code, stderr)
	}
	return out
}

// checkCompletions compares the offers, one line per case in the order of
// cases, with what each case wants.
func checkCompletions(t *testing.T, shell string, cases []completionCase, out string) {
	t.Helper()
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != len(cases) {
		t.Fatalf("%s printed %d lines for %d cases:\n%s", shell, len(got), len(cases), out)
	}
	for i, tc := range cases {
		offered := strings.Fields(got[i])
		want := slices.Clone(tc.want)
		slices.Sort(offered)
		slices.Sort(want)
		if !slices.Equal(offered, want) {
			t.Errorf("%s: schedctl %s<TAB> offers %q, want %q", shell, strings.Join(tc.words, " "), offered, want)
		}
	}
}

// The bash script, run by bash, completes every command of the table and
// every flag of each command, a group's subcommands and completion's
// shells.
func TestBashCompletionNamesEveryCommandAndFlag(t *testing.T) {
	cases := completionCases(t)
	var script strings.Builder
	script.WriteString(completionScript(t, "bash"))
	// complete(1) is what a user's shell runs on TAB: it fills COMP_WORDS
	// and COMP_CWORD and reads COMPREPLY back.
	script.WriteString(`
compopt() { [[ $* == "-o default" ]] && COMPREPLY=("` + filesMarker + `"); }
offer() {
	COMP_WORDS=(schedctl "$@")
	COMP_CWORD=$#
	_schedctl
	echo "${COMPREPLY[*]}"
}
`)
	for _, tc := range cases {
		fmt.Fprintf(&script, "offer %s\n", shellWords(tc.words))
	}
	checkCompletions(t, "bash", cases, shellRun(t, "bash", script.String()))
	// The registration itself, as sourcing the script in a shell does.
	if out := shellRun(t, "bash", completionScript(t, "bash")+"complete -p schedctl\n"); out != "complete -F _schedctl schedctl\n" {
		t.Errorf("registration: %q", out)
	}
}

// The zsh script, run by zsh with the completion system's functions
// replaced by ones that print what they are given, offers the same words.
// zsh is not on every machine; without it the script is only checked to
// name every command and flag.
func TestZshCompletion(t *testing.T) {
	script := completionScript(t, "zsh")
	for _, c := range commands() {
		if !strings.Contains(script, "("+zshQuote(c.name)+")") {
			t.Errorf("the zsh script has no case for %s", c.name)
		}
		for _, f := range c.flags() {
			if !strings.Contains(script, zshQuote(dashed(f.Name) + ":")[:len(dashed(f.Name))+2]) {
				t.Errorf("the zsh script does not name %s of %s", dashed(f.Name), c.name)
			}
		}
	}
	if _, err := exec.LookPath("zsh"); err != nil {
		t.Skipf("zsh is not installed; checked the script's text only")
	}
	cases := completionCases(t)
	var s strings.Builder
	s.WriteString(`
compdef() { :; }
# Print the words of the array named last (the part before the first
# colon, for _describe) that start with the word under the cursor, as the
# real functions offer them; and a marker for file names.
_offer() { print -r -- ${(M)argv:#${(b)words[CURRENT]}*}; }
_describe() { local -a items=("${(@P)argv[-1]}"); _offer "${items[@]%%:*}"; }
compadd() { _offer "${(@P)argv[-1]}"; }
_files() { print -r -- '` + filesMarker + `'; }
`)
	s.WriteString(script)
	s.WriteString(`
offer() {
	local -a words=(schedctl "$@")
	local CURRENT=$(($# + 1))
	local offered=$(_schedctl)
	print -r -- ${offered//$'\n'/ }
}
`)
	for _, tc := range cases {
		fmt.Fprintf(&s, "offer %s\n", shellWords(tc.words))
	}
	checkCompletions(t, "zsh", cases, shellRun(t, "zsh", s.String()))
}

// The completion command refuses anything but one known shell.
func TestCompletionUsage(t *testing.T) {
	for _, args := range [][]string{{"completion"}, {"completion", "fish"}, {"completion", "bash", "zsh"}} {
		if code, out, stderr := cli(t, time.Now(), args...); code != 2 || out != "" || !strings.Contains(stderr, "schedctl completion: ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}
}

// Every word completion offers as a flag's value is one the command
// accepts: each command runs with each, against the fake api.
func TestCompletionValuesAreAccepted(t *testing.T) {
	_, addr := startFake(t)
	base := map[string][]string{
		"preview": {"--cron", "@daily", "--count", "1"}, "create": {}, "get": {"J1"}, "list": {}, "update": {"J1", "--name", "n"},
		"pause": {"J1"}, "resume": {"J1"}, "delete": {"J1"}, "trigger": {"J1"}, "cancel": {"J1", "E1"}, "history": {"J1"}, "executions": {}, "forecast": {"--window", "1h"},
		"server-preview": {"--cron", "@daily"}, "backfill": {"J1", "--from", "2h", "--to", "1h"}, "audit": {},
		"dlq list": {}, "dlq show": {"E1"}, "dlq redrive": {"--all"},
		"calendar create": {"c1"}, "calendar update": {"c1"}, "calendar import": {"c1", "testdata/holidays.ics"},
		"calendar list": {}, "calendar show": {"c1"}, "calendar delete": {"c1"}, "calendar audit": {},
		"signing-key create": {}, "signing-key rotate": {}, "signing-key list": {}, "signing-key audit": {},
		"token create": {"ci"}, "token list": {}, "token revoke": {"0123456789abcdef"}, "token audit": {}, "token denied": {},
		"bulk pause": {"--dry-run"}, "bulk resume": {"--dry-run"}, "bulk delete": {"--dry-run"},
		"export": {}, "import": {"--dry-run", "--target-template", "http://runner/run?cmd={{urlquery .Command}}", "testdata/import.cron"},
	}
	tree, err := buildTree(commands())
	if err != nil {
		t.Fatal(err)
	}
	for _, cc := range tree.cmds {
		if len(cc.values) == 0 {
			continue
		}
		args, ok := base[cc.c.name]
		if !ok {
			t.Errorf("%s offers flag values: give it a command line in this test", cc.c.name)
			continue
		}
		for name, words := range cc.values {
			for _, w := range words {
				line := append(slices.Clone(args), dashed(name), w)
				var code int
				var stderr string
				if cc.c.run.remote() {
					code, _, stderr = run(t, addr, nil, append([]string{cc.c.name}, line...)...)
				} else {
					code, _, stderr = cli(t, fakeNow, append(strings.Fields(cc.c.name), line...)...)
				}
				if code != 0 {
					t.Errorf("schedctl %s %s: exit %d: %s", cc.c.name, strings.Join(line, " "), code, stderr)
				}
			}
		}
	}
}

// shellWords quotes words for bash and zsh alike.
func shellWords(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
