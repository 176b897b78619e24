package main

import (
	"flag"
	"strings"
	"testing"
	"time"
)

// Every row of the table answers -h and `help NAME` with its synopsis, its
// summary and every flag it registers, and is listed by `schedctl help`.
func TestEveryCommandHasHelp(t *testing.T) {
	now := time.Now()
	_, listing, _ := cli(t, now, "help")
	seen := map[string]bool{}
	for _, c := range commands() {
		if seen[c.name] {
			t.Errorf("two rows named %q", c.name)
		}
		seen[c.name] = true
		if c.summary == "" || c.usage == "" || c.run == nil {
			t.Errorf("%s: a row needs a usage, a summary and a runner", c.name)
		}
		if !strings.Contains(listing, "  "+c.name+" ") || !strings.Contains(listing, firstLine(c.summary)) {
			t.Errorf("schedctl help does not list %s:\n%s", c.name, listing)
		}
		fs, _ := c.flagSet(canonicalEnv())
		for _, args := range [][]string{
			append(strings.Fields(c.name), "-h"),
			append([]string{"help"}, strings.Fields(c.name)...),
		} {
			code, out, stderr := cli(t, now, args...)
			if code != 0 || out != "" || !strings.HasPrefix(stderr, "usage: schedctl "+c.name+" "+c.usage+"\n\n"+c.summary+"\n") {
				t.Errorf("%q: exit %d, stdout %q, stderr:\n%s", args, code, out, stderr)
			}
			fs.VisitAll(func(f *flag.Flag) {
				if !strings.Contains(stderr, "  -"+f.Name+" ") && !strings.Contains(stderr, "  -"+f.Name+"\n") {
					t.Errorf("%q does not show flag -%s:\n%s", args, f.Name, stderr)
				}
			})
		}
	}
}

// The gRPC commands take the connection flags; the offline ones do not.
func TestConnectionFlagsOnlyOnRemoteCommands(t *testing.T) {
	for _, c := range commands() {
		fs, _ := c.flagSet(canonicalEnv())
		for _, name := range []string{"addr", "token", "o", "output", "timeout"} {
			has := fs.Lookup(name) != nil
			if c.run.remote() && !has {
				t.Errorf("%s lacks -%s", c.name, name)
			}
			if !c.run.remote() && has && !(c.name == "sink" && name == "addr") {
				t.Errorf("offline command %s takes the connection flag -%s", c.name, name)
			}
		}
	}
}

func TestSinkHelp(t *testing.T) {
	code, out, stderr := cli(t, time.Now(), "sink", "--help")
	if code != 0 || out != "" || !strings.Contains(stderr, "-signing-secret string") || !strings.Contains(stderr, `(default "127.0.0.1:8099")`) {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, out, stderr)
	}
	if code, _, stderr := cli(t, time.Now(), "sink", "--port", "1"); code != 2 || !strings.Contains(stderr, "flag provided but not defined: -port") {
		t.Errorf("unknown flag: exit %d, stderr %q", code, stderr)
	}
}
