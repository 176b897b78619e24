package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/config"
	"github.com/sundialhq/sundial/services/api/internal/app"
)

func loadSettings(t *testing.T, args ...string) (*app.Config, error) {
	t.Helper()
	var s app.Config
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

// Plaintext is accepted on loopback only, unless asked for: a token must
// not cross a network in clear by default.
func TestTLSSettings(t *testing.T) {
	dir := t.TempDir()
	if _, err := devTLS(dir, "dev", time.Now()); err != nil {
		t.Fatal(err)
	}
	cert, key, ca := filepath.Join(dir, devServerCertFile), filepath.Join(dir, devServerKeyFile), filepath.Join(dir, devCAFile)
	ok := [][]string{
		nil, // 127.0.0.1:9090, no HTTP: the local default
		{"--grpc-addr", "localhost:9090", "--http-addr", "[::1]:8080"},
		{"--grpc-addr", "0.0.0.0:9090", "--http-addr", ":8080", "--allow-plaintext"},
		{"--grpc-addr", "0.0.0.0:9090", "--tls-cert-file", cert, "--tls-key-file", key},
		{"--grpc-addr", ":9090", "--http-addr", ":8080", "--tls-cert-file", cert, "--tls-key-file", key,
			"--tls-client-ca-file", ca, "--http-tls-client-ca-file", ca, "--tls-min-version", "1.3"},
	}
	for _, args := range ok {
		if _, err := loadSettings(t, args...); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
	bad := map[string][]string{
		"tls-cert-file: required: --grpc-addr 0.0.0.0:9090 is not a loopback address": {"--grpc-addr", "0.0.0.0:9090"},
		"tls-cert-file: required: --http-addr :8080 is not a loopback address":        {"--http-addr", ":8080"},
		"allow-plaintext: contradicts --tls-cert-file":                                {"--tls-cert-file", cert, "--tls-key-file", key, "--allow-plaintext"},
		"http-tls-client-ca-file: has no effect without --tls-cert-file":              {"--http-tls-client-ca-file", ca},
		"tls-key-file: required with --tls-cert-file":                                 {"--tls-cert-file", cert},
		"tls-client-ca-file: ":      {"--tls-cert-file", cert, "--tls-key-file", key, "--tls-client-ca-file", key},
		"http-tls-client-ca-file: ": {"--tls-cert-file", cert, "--tls-key-file", key, "--http-tls-client-ca-file", "/nonexistent"},
	}
	for want, args := range bad {
		if _, err := loadSettings(t, args...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", args, err, want)
		}
	}
}

func TestDevTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	var out, errOut strings.Builder
	if code := devTLSMain([]string{"--dir", dir}, &out, &errOut, now); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "made a development CA "+filepath.Join(dir, "ca.crt")) {
		t.Fatalf("said %q", out.String())
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dir: %v %v", st, err)
	}
	for _, f := range []string{devCAKeyFile, devServerKeyFile, devClientKeyFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, st, err)
		}
	}
	roots := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(dir, devCAFile))
	if err != nil || !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("ca.crt: %v", err)
	}
	server, err := tls.LoadX509KeyPair(filepath.Join(dir, devServerCertFile), filepath.Join(dir, devServerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
		if _, err := server.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: now}); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	if _, err := server.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "api.example.com", CurrentTime: now}); err == nil {
		t.Error("the development certificate is valid for a name that is not loopback")
	}
	client, err := tls.LoadX509KeyPair(filepath.Join(dir, devClientCertFile), filepath.Join(dir, devClientKeyFile))
	if err != nil || client.Leaf.Subject.CommonName != "dev" {
		t.Fatalf("client certificate: %v %v", client.Leaf, err)
	}

	// A second run keeps valid files (a schedctl holding the CA keeps
	// working); close to the server certificate's expiry it makes new ones.
	out.Reset()
	if code := devTLSMain([]string{"--dir", dir}, &out, &errOut, now.Add(24*time.Hour)); code != 0 || !strings.HasPrefix(out.String(), "kept") {
		t.Fatalf("second run: %d %q", code, out.String())
	}
	after, _ := os.ReadFile(filepath.Join(dir, devCAFile))
	if string(after) != string(caPEM) {
		t.Fatal("a valid CA was replaced")
	}
	made, err := devTLS(dir, "dev", now.Add(85*24*time.Hour))
	if err != nil || !made {
		t.Fatalf("near expiry: made %v, %v", made, err)
	}
	if code := devTLSMain([]string{"--dir", ""}, &out, &errOut, now); code != 2 {
		t.Fatalf("empty --dir: exit %d", code)
	}
}
