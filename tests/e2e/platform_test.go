//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// binDir holds the service binaries, built once for the whole run.
var binDir string

// tlsMode is how every platform's api serves its gRPC and HTTP ports:
// TLS unless SUNDIAL_E2E_TLS says plaintext or mtls, because TLS is how
// the api runs anywhere but a developer's loopback, and the suite is to
// prove the platform works as deployed.
var tlsMode = harness.TLS

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if v := os.Getenv("SUNDIAL_E2E_TLS"); v != "" {
		mode, err := harness.ParseTLSMode(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: SUNDIAL_E2E_TLS: %v\n", err)
			return 2
		}
		tlsMode = mode
	}
	fmt.Fprintf(os.Stderr, "e2e: the api serves %s (SUNDIAL_E2E_TLS=plaintext|tls|mtls)\n", tlsMode)
	dir, err := os.MkdirTemp("", "sundial-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := harness.RepoRoot(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := harness.Build(context.Background(), root, dir); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	binDir = dir
	return m.Run()
}

// platform is one isolated Sundial deployment (testkit/harness): its own
// Postgres schema, topic prefix, consumer group, Redis key prefix,
// Cassandra keyspace and election path, shared by the processes it starts.
type platform struct {
	t    *testing.T
	plat *harness.Platform
	ns   *harness.Namespace
}

// newPlatform starts the api (with apiArgs) and a relay; tests start the
// prefetchers and workers they need with the flags they need.
func newPlatform(t *testing.T, apiArgs ...string) *platform {
	t.Helper()
	return newPlatformOn(t, harness.InfraFromEnv(), apiArgs...)
}

// newPlatformOn is newPlatform on infra (another Postgres, say).
func newPlatformOn(t *testing.T, infra harness.Infra, apiArgs ...string) *platform {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	ns, err := harness.NewNamespace(ctx, infra, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: after every process stopped.
	t.Cleanup(func() {
		if err := ns.Drop(context.Background()); err != nil {
			t.Logf("namespace %s not cleaned up: %v", ns.Name, err)
		}
	})
	p := &platform{t: t, ns: ns}
	// The log folder is made before stopAll is registered, so it outlives
	// the processes (cleanups run last-registered first) and their logs can
	// be shown when the test fails.
	logDir := t.TempDir()
	p.plat, err = harness.NewPlatform(harness.Config{
		BinDir:    binDir,
		Infra:     infra,
		Namespace: ns,
		LogDir:    logDir,
		Logger:    slog.New(slog.NewTextHandler(t.Output(), nil)),
		Token:     "e2e-token",
		Tenant:    "e2e",
		TLS:       tlsMode,
		// The sinks are httptest servers on loopback, which the worker's
		// outbound-address policy refuses unless allowlisted.
		Env: []string{"SUNDIAL_ALLOW_TARGET_ADDRS=127.0.0.1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stopAll)
	if _, err := p.plat.StartAPI(ctx, "api", apiArgs...); err != nil {
		t.Fatal(err)
	}
	// Topics are created by the relay at start; the workers subscribe after.
	p.start("relay", "relay", "--topic-partitions", "4", "--node-id", "relay-1")
	return p
}

// proc is one running service process.
type proc struct{ *harness.Process }

// start runs service bin (api, prefetcher, relay, worker) under name and
// waits for its /readyz.
func (p *platform) start(name, bin string, args ...string) *proc {
	p.t.Helper()
	pr, err := p.plat.Start(ctxT(p.t, 2*time.Minute), name, bin, args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return &proc{pr}
}

// kill sends SIGKILL: the process gets no chance to drain.
func (pr *proc) kill(t *testing.T) {
	t.Helper()
	if err := pr.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s killed with SIGKILL", pr.Name)
}

// stop sends SIGTERM and waits for a graceful exit.
func (pr *proc) stop(*testing.T) error { return pr.Stop(40 * time.Second) }

func (p *platform) stopAll() {
	if err := p.plat.Stop(); err != nil {
		p.t.Errorf("graceful stop: %v", err)
	}
	if p.t.Failed() {
		for _, pr := range p.plat.Processes() {
			p.t.Logf("---- %s log (tail) ----\n%s", pr.Name, harness.Tail(pr.LogPath, 60))
		}
	}
}

// client is a JobService client authenticated as the platform's tenant.
func (p *platform) client() sundialv1.JobServiceClient {
	p.t.Helper()
	cl, err := p.plat.Client()
	if err != nil {
		p.t.Fatal(err)
	}
	return cl
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
