package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sundialhq/sundial/pkg/domain/auth"
)

func runHash(t *testing.T, stdin string, o tokenHashOpts, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{io: cmdIO{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader(stdin)}}
	code := runTokenHash(context.Background(), e, &o, args)
	return out.String(), errOut.String(), code
}

// The hash printed verifies the token read from stdin, and with
// --principal the line is a tokens-file entry as the api reads it.
func TestTokenHash(t *testing.T) {
	out, errOut, code := runHash(t, "sdb_from_stdin\n", tokenHashOpts{})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	h, err := auth.ParseHash(strings.TrimSpace(out))
	if err != nil || !h.Matches("sdb_from_stdin") || h.Matches("sdb_other") {
		t.Fatalf("hash %q: %v", out, err)
	}
	if h.Params != auth.BootstrapHashParams {
		t.Fatalf("params %+v", h.Params)
	}

	out, _, code = runHash(t, "sdb_x", tokenHashOpts{principal: "acme:ops:read-only"})
	var m map[string]string
	if code != 0 || yaml.Unmarshal([]byte(out), &m) != nil || len(m) != 1 {
		t.Fatalf("line %q", out)
	}
	for k, v := range m {
		h, err := auth.ParseHash(k)
		if err != nil || !h.Matches("sdb_x") || v != "acme:ops:read-only" {
			t.Fatalf("line %q: %v", out, err)
		}
	}
}

func TestTokenHashGenerates(t *testing.T) {
	out, errOut, code := runHash(t, "", tokenHashOpts{generate: true, principal: "acme"})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "token: sdb_") {
		t.Fatalf("exit %d %q %s", code, out, errOut)
	}
	token := strings.TrimPrefix(lines[0], "token: ")
	if len(token) != len("sdb_")+43 {
		t.Fatalf("token %q", token)
	}
	var m map[string]string
	if err := yaml.Unmarshal([]byte(lines[1]), &m); err != nil {
		t.Fatal(err)
	}
	for k := range m {
		if h, err := auth.ParseHash(k); err != nil || !h.Matches(token) {
			t.Fatalf("hash of the printed token: %v", err)
		}
	}
	again, _, _ := runHash(t, "", tokenHashOpts{generate: true})
	if strings.Contains(again, token) {
		t.Fatal("the same token twice")
	}
}

func TestTokenHashRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		stdin string
		o     tokenHashOpts
		args  []string
		want  string
	}{
		"argument":      {stdin: "x", args: []string{"secret"}, want: "takes no arguments"},
		"empty stdin":   {want: "no token on stdin"},
		"api token":     {stdin: "sdl_0123456789abcdef_x", want: "sdl_"},
		"bad principal": {stdin: "x", o: tokenHashOpts{principal: "acme:x:boss"}, want: "--principal"},
		"separator":     {stdin: "a=b", want: "'='"},
	} {
		out, errOut, code := runHash(t, tc.stdin, tc.o, tc.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, out %q, err %q", name, code, out, errOut)
		}
		if strings.Contains(errOut, "secret") {
			t.Errorf("%s: the error quotes the argument", name)
		}
	}
}
