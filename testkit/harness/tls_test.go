package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/testkit/tlstest"
)

func TestParseTLSMode(t *testing.T) {
	for _, m := range []TLSMode{Plaintext, TLS, MutualTLS} {
		got, err := ParseTLSMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseTLSMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseTLSMode("TLS"); err == nil {
		t.Error(`ParseTLSMode("TLS"): no error`)
	}
	if _, err := NewPlatform(Config{BinDir: "x", Namespace: &Namespace{}, LogDir: t.TempDir(), TLS: MutualTLS + 1}); err == nil {
		t.Error("NewPlatform took an unknown TLS mode")
	}
}

// TestTLSNeedsTheDevelopmentCA: without Infra.CAFile a TLS platform makes
// no CA of its own; it refuses, naming the field and where the CA comes
// from.
func TestTLSNeedsTheDevelopmentCA(t *testing.T) {
	p := &Platform{cfg: Config{TLS: TLS, LogDir: t.TempDir(), BinDir: t.TempDir()}}
	_, err := p.apiTLSArgs(context.Background())
	if err == nil || !strings.Contains(err.Error(), "Config.Infra.CAFile is empty") || !strings.Contains(err.Error(), EnvCAFile) {
		t.Fatalf("got %v, want an error naming Config.Infra.CAFile and %s", err, EnvCAFile)
	}
	if p.TLSDir() != "" || p.CAFile() != "" {
		t.Fatalf("TLSDir %q, CAFile %q after a refusal", p.TLSDir(), p.CAFile())
	}
}

// TestHTTPClientVerifiesWithThePlatformsCA gives a platform a CA and the
// files `sundial-api dev-tls` signs with it, made here by tlstest, and checks its
// HTTP client against a server requiring client certificates from that
// CA: under MutualTLS it presents one, under TLS it does not, and a server
// of another CA is refused.
func TestHTTPClientVerifiesWithThePlatformsCA(t *testing.T) {
	dir, caFile, ca := devTLSFiles(t)
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, tlsServerCertFile), filepath.Join(dir, tlsServerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	srv := tlstest.MutualTLSServer(t, pair, ca)
	addr := strings.TrimPrefix(srv.URL, "https://")

	get := func(mode TLSMode) error {
		p := &Platform{cfg: Config{TLS: mode, Infra: Infra{CAFile: caFile}}, tls: dir}
		hc, err := p.HTTPClient()
		if err != nil {
			return err
		}
		defer hc.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL(addr)+"/", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := get(MutualTLS); err != nil {
		t.Fatalf("MutualTLS: %v", err)
	}
	if err := get(TLS); err == nil {
		t.Error("TLS (no client certificate) was let in by a server requiring one")
	}

	other, otherCA, _ := devTLSFiles(t)
	p := &Platform{cfg: Config{TLS: MutualTLS, Infra: Infra{CAFile: otherCA}}, tls: other}
	hc, err := p.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	if resp, err := hc.Get(srv.URL); err == nil {
		resp.Body.Close()
		t.Error("a server certificate of another CA was accepted")
	}
}

// devTLSFiles lays out, under dev-tls's names, a loopback server
// certificate and a client certificate signed by a CA of the test's own,
// whose certificate file it returns too.
func devTLSFiles(t *testing.T) (string, string, *x509.CertPool) {
	t.Helper()
	ca := tlstest.NewCA(t, "harness-test")
	srv, cl := ca.Server("api"), ca.Client("client", "harness")
	dir := t.TempDir()
	for dst, src := range map[string]string{
		tlsServerCertFile: srv.CertFile, tlsServerKeyFile: srv.KeyFile,
		tlsClientCertFile: cl.CertFile, tlsClientKeyFile: cl.KeyFile,
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, ca.CertFile, ca.Pool()
}
