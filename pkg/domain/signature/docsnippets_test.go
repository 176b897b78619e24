package signature

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// snippet returns the code block of the given language that follows
// "### Verifying a request" in docs/security.md.
func snippet(t *testing.T, lang string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "### Verifying a request")
	if i < 0 {
		t.Fatal("docs/security.md has no section 'Verifying a request'")
	}
	doc = doc[i:]
	start := strings.Index(doc, "```"+lang+"\n")
	if start < 0 {
		t.Fatalf("no %s block in the section", lang)
	}
	code := doc[start+len("```"+lang+"\n"):]
	return code[:strings.Index(code, "```")]
}

// The Python and Node verifiers docs/security.md shows accept what the
// worker signs — with either key during an overlap — and refuse another
// key, another body and a late request. Skipped where the interpreter is
// missing.
func TestDocSnippets(t *testing.T) {
	now := time.Now()
	cur := Key{ID: "k20261126-77b0e4d2", Secret: []byte("sdk_current-secret")}
	prev := Key{ID: "k20261126-3f9a1c07", Secret: []byte("sdk_previous-secret")}
	body := []byte(`{"report":"daily","n":1}`)
	exec1 := "01938a5e-7c4f-7b1a-9d2e-3f4a5b6c7d8e"
	overlap := SignKeys([]Key{cur, prev}, now, exec1, body)
	late := SignKeys([]Key{cur}, now.Add(-time.Hour), exec1, body)
	platform := Sign([]byte("platform"), now, exec1, body)
	type check struct {
		Keys   map[string]string `json:"keys"`
		Header string            `json:"header"`
		Body   string            `json:"body"`
		Want   bool              `json:"want"`
	}
	checks := []check{
		{map[string]string{cur.ID: string(cur.Secret)}, overlap, string(body), true},
		{map[string]string{prev.ID: string(prev.Secret)}, overlap, string(body), true},
		{map[string]string{cur.ID: string(cur.Secret), prev.ID: string(prev.Secret)}, overlap, string(body), true},
		{map[string]string{"k-other": "sdk_other"}, overlap, string(body), false},
		{map[string]string{cur.ID: "sdk_wrong"}, overlap, string(body), false},
		{map[string]string{cur.ID: string(cur.Secret)}, overlap, `{"report":"forged"}`, false},
		{map[string]string{cur.ID: string(cur.Secret)}, late, string(body), false},
		// An unnamed v1 (the platform secret's, during a migration) is
		// no tenant key's.
		{map[string]string{"any": "platform"}, platform, string(body), false},
		{map[string]string{cur.ID: string(cur.Secret)}, SignKeys([]Key{cur, {Secret: []byte("platform")}}, now, exec1, body), string(body), true},
	}
	in, err := json.Marshal(map[string]any{"exec": exec1, "checks": checks})
	if err != nil {
		t.Fatal(err)
	}
	drivers := map[string][2]string{
		"python3": {snippet(t, "python"), `
import json, sys
d = json.load(sys.stdin)
print(json.dumps([verify(c["keys"], c["header"], d["exec"], c["body"].encode()) for c in d["checks"]]))
`},
		"node": {snippet(t, "js"), `
const d = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
console.log(JSON.stringify(d.checks.map(c => verify(c.keys, c.header, d.exec, Buffer.from(c.body)))));
`},
	}
	t.Run("sh", func(t *testing.T) {
		for _, bin := range []string{"bash", "openssl"} {
			if _, err := exec.LookPath(bin); err != nil {
				t.Skipf("%s not installed", bin)
			}
		}
		code := snippet(t, "sh")
		for i, c := range checks {
			bodyFile := filepath.Join(t.TempDir(), "body")
			if err := os.WriteFile(bodyFile, []byte(c.Body), 0o600); err != nil {
				t.Fatal(err)
			}
			got := false
			for kid, secret := range c.Keys {
				cmd := exec.Command("bash", "-c", code+`sundial_verify "$@"`, "sh", kid, secret, c.Header, exec1, bodyFile)
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				switch {
				case err == nil:
					got = true
				case !errors.As(err, &exit) || len(out) > 0:
					t.Fatalf("check %d: %v\n%s", i, err, out)
				}
			}
			if got != c.Want {
				t.Errorf("check %d (keys %v, header %q): %v, want %v", i, c.Keys, c.Header, got, c.Want)
			}
		}
	})
	for bin, code := range drivers {
		t.Run(bin, func(t *testing.T) {
			if _, err := exec.LookPath(bin); err != nil {
				t.Skipf("%s not installed", bin)
			}
			flag := "-c"
			if bin == "node" {
				flag = "-e"
			}
			cmd := exec.Command(bin, flag, code[0]+code[1])
			cmd.Stdin = strings.NewReader(string(in))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var got []bool
			if err := json.Unmarshal(out, &got); err != nil || len(got) != len(checks) {
				t.Fatalf("output %s (%v)", out, err)
			}
			for i, c := range checks {
				if got[i] != c.Want {
					t.Errorf("check %d (keys %v, header %q): %v, want %v", i, c.Keys, c.Header, got[i], c.Want)
				}
			}
		})
	}
}
