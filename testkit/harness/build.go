package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Services are the four service binaries, in the order a deployment starts
// them.
var Services = []string{"api", "prefetcher", "relay", "worker"}

// Binary is the file name of service's binary in a build directory.
func Binary(service string) string { return "sundial-" + service }

// RepoRoot is the first directory at or above dir holding go.work.
func RepoRoot(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		if d == filepath.Dir(d) {
			return "", errors.New("harness: no go.work at or above " + abs)
		}
	}
}

// Build compiles the four services of the repository at root into outDir
// as sundial-<service>, one `go build` after another (they share the build
// cache, so the later ones are quick).
func Build(ctx context.Context, root, outDir string) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	for _, s := range Services {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(outDir, Binary(s)), ".")
		cmd.Dir = filepath.Join(root, "services", s)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("harness: build %s: %w\n%s", s, err, out.String())
		}
	}
	return nil
}
