package deploytest

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// -update rewrites generated files (dashboards, the chart's copies of the
// dashboards and rules, golden renders) instead of comparing with them.
var update = flag.Bool("update", false, "rewrite generated and golden files instead of comparing")

// kubeVersion is what helm renders for: helm built from source (the
// Makefile's `go install`) otherwise assumes an old default.
const kubeVersion = "1.30.0"

var rootOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
})

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := rootOnce()
	if err != nil {
		t.Fatalf("no go.work above the working directory: %v", err)
	}
	return root
}

func repoPath(t testing.TB, elem ...string) string {
	return filepath.Join(append([]string{repoRoot(t)}, elem...)...)
}

// tool finds a binary the Makefile installs into .tools/bin (helm,
// promtool), or on PATH. It fails, never skips: a check that silently stops
// running is worse than a red build.
func tool(t testing.TB, name, target string) string {
	t.Helper()
	if p := repoPath(t, ".tools", "bin", name); fileExists(p) {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	t.Fatalf("%s is not installed: run `make %s` (installs it into .tools/bin)", name, target)
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// run runs a command and returns its stdout, failing the test with stderr.
func run(t testing.TB, dir, bin string, args ...string) []byte {
	t.Helper()
	out, err := runErr(dir, bin, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", filepath.Base(bin), strings.Join(args, " "), err)
	}
	return out
}

type cmdError struct {
	err    error
	stderr string
}

func (e *cmdError) Error() string { return e.err.Error() + "\n" + e.stderr }

func runErr(dir, bin string, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &cmdError{err: err, stderr: stderr.String() + stdout.String()}
	}
	return stdout.Bytes(), nil
}
