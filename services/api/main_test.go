package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/services/api/internal/app"
)

// atExit holds what tests share across the whole run (a binary built
// once) and must remove when it ends.
var atExit []func()

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		for _, f := range atExit {
			f()
		}
	}))
}

// The Redis and Cassandra TLS and credentials are validated with the other
// settings, and so are the migrate subcommand's Cassandra ones (it exits 2
// before connecting to anything).
func TestComponentSecuritySettings(t *testing.T) {
	var s app.Config
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.Register(fs)
	if err := config.Load(fs, []string{"--tokens", "t=acme", "--redis-username", "api", "--cassandra-tls-ca-file", "/ca.crt"}, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	var p config.Problems
	s.Validate(&p)
	for _, want := range []string{"redis-password:", "cassandra-tls-ca-file:"} {
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one naming %s", err, want)
		}
	}

	var stderr strings.Builder
	if code := migrateMain([]string{"--cassandra-username", "api"}, &stderr); code != 2 || !strings.Contains(stderr.String(), "cassandra-password:") {
		t.Fatalf("migrate exited %d: %s", code, stderr.String())
	}
}
