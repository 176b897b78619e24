package app

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/process/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSplitList(t *testing.T) {
	got := splitList(" a:1, ,b ,")
	if len(got) != 2 || got[0] != "a:1" || got[1] != "b" {
		t.Fatalf("splitList = %q", got)
	}
}

func TestQuotaSettings(t *testing.T) {
	load := func(args []string, env map[string]string) (*Config, error) {
		var s Config
		fs := flag.NewFlagSet("api", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		s.Register(fs)
		if err := config.Load(fs, append([]string{"--tokens", "t=acme"}, args...), func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
			return nil, err
		}
		var p config.Problems
		s.Validate(&p)
		return &s, p.Err()
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "quotas.yaml")
	if err := os.WriteFile(file, []byte("defaults: {max_jobs: 50}\ntenants: {acme: {min_interval: 1m}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	s, err := load([]string{"--quotas-file", file, "--quota-create-rate-per-minute", "7"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.quotas.For("acme"); got != (quotas.Limits{MaxJobs: 50, MinInterval: time.Minute, CreatesPerMinute: 7}) {
		t.Fatalf("acme = %+v", got)
	}
	if got := s.quotas.For("globex"); got != (quotas.Limits{MaxJobs: 50, MinInterval: time.Second, CreatesPerMinute: 7}) {
		t.Fatalf("globex = %+v", got)
	}
	// One value in two places is refused, whether the flag came from the
	// command line or the environment.
	if _, err := load([]string{"--quotas-file", file, "--quota-max-jobs", "9"}, nil); err == nil || !strings.Contains(err.Error(), "quota-max-jobs") {
		t.Fatalf("flag and file: %v", err)
	}
	if _, err := load([]string{"--quotas-file", file}, map[string]string{"SUNDIAL_QUOTA_MAX_JOBS": "9"}); err == nil {
		t.Fatal("env and file: accepted")
	}
	if _, err := load([]string{"--quota-min-interval", "-1s"}, nil); err == nil {
		t.Fatal("negative min interval accepted")
	}
	if _, err := load([]string{"--quotas-file", filepath.Join(dir, "missing.yaml")}, nil); err == nil || !strings.Contains(err.Error(), "quotas-file") {
		t.Fatalf("missing file: %v", err)
	}
	s, err = load(nil, nil)
	if err != nil || s.quotas.Defaults() != quotas.DefaultLimits() {
		t.Fatalf("built-in defaults: %+v %v", s.quotas.Defaults(), err)
	}
}

// --secrets-dir must be a directory and the key-encryption key file must
// hold at least 32 bytes; a good file loads the key the signing-key
// service is built with.
func TestSecretAndSigningKeySettings(t *testing.T) {
	load := func(args ...string) (*Config, error) {
		var s Config
		fs := flag.NewFlagSet("api", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		s.Register(fs)
		if err := config.Load(fs, append([]string{"--tokens", "t=acme"}, args...), func(string) (string, bool) { return "", false }); err != nil {
			t.Fatal(err)
		}
		var p config.Problems
		s.Validate(&p)
		return &s, p.Err()
	}
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("too short"), 0o600); err != nil {
		t.Fatal(err)
	}
	for flagName, args := range map[string][]string{
		"secrets-dir":                     {"--secrets-dir", "/nonexistent/secrets"},
		"signing-key-encryption-key-file": {"--signing-key-encryption-key-file", short},
	} {
		if _, err := load(args...); err == nil || !strings.Contains(err.Error(), flagName+":") {
			t.Errorf("%v: error %v, want one naming %s", args, err, flagName)
		}
	}
	good := filepath.Join(t.TempDir(), "kek")
	if err := os.WriteFile(good, []byte(strings.Repeat("k", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := load("--signing-key-encryption-key-file", good, "--secrets-dir", t.TempDir())
	if err != nil || s.kek == nil {
		t.Fatalf("good settings: %v (kek loaded: %v)", err, s.kek != nil)
	}
}
