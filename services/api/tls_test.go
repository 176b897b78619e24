package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/process/config"
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
	caDir, dir := devCADir(t, time.Now()), t.TempDir()
	if _, err := devTLS(caDir, dir, "dev", time.Now()); err != nil {
		t.Fatal(err)
	}
	cert, key, ca := filepath.Join(dir, devServerCertFile), filepath.Join(dir, devServerKeyFile), filepath.Join(caDir, devCAFile)
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

// devCADir writes a CA as deploy/local/infra.sh's openssl makes it (RSA
// 2048, the key as PKCS #8 PEM, ten years from now) into a directory of
// its own as ca.crt and ca.key.
func devCADir(t *testing.T, now time.Time) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Sundial local CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, devCAFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, devCAKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readDir is every file in dir and its content.
func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// TestDevTLS: dev-tls signs the api's certificates with the CA it is
// given, makes no CA of its own (none written, none without --ca-dir, an
// older one in --dir removed) and leaves the CA's directory as it was.
func TestDevTLS(t *testing.T) {
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	caDir := devCADir(t, now)
	caBefore := readDir(t, caDir)
	dir := filepath.Join(t.TempDir(), "tls")
	var out, errOut strings.Builder
	if code := devTLSMain([]string{"--ca-dir", caDir, "--dir", dir}, &out, &errOut, now); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if want := "made, signed by the development CA " + filepath.Join(caDir, "ca.crt"); !strings.HasPrefix(out.String(), want) {
		t.Fatalf("said %q, want it to start %q", out.String(), want)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dir: %v %v", st, err)
	}
	got := readDir(t, dir)
	if len(got) != 4 || got[devCAFile] != "" || got[devCAKeyFile] != "" {
		t.Fatalf("--dir holds %d files, want tls.crt, tls.key, client.crt, client.key and no CA", len(got))
	}
	for _, f := range []string{devServerKeyFile, devClientKeyFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, st, err)
		}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(caBefore[devCAFile])) {
		t.Fatal("ca.crt: no certificate")
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
	if _, err := client.Leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}

	// A second run keeps valid files (an api serving them and a client
	// holding the CA keep working), and removes a CA an older dev-tls
	// left in --dir; close to the server certificate's expiry it makes
	// new ones.
	for _, f := range []string{devCAFile, devCAKeyFile} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("an older dev-tls's own CA"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	if code := devTLSMain([]string{"--ca-dir", caDir, "--dir", dir}, &out, &errOut, now.Add(24*time.Hour)); code != 0 || !strings.HasPrefix(out.String(), "kept") {
		t.Fatalf("second run: %d %q %s", code, out.String(), errOut.String())
	}
	if after := readDir(t, dir); !maps.Equal(after, got) {
		t.Fatalf("second run: --dir holds %v, want the first run's four files unchanged", slices.Sorted(maps.Keys(after)))
	}
	made, err := devTLS(caDir, dir, "dev", now.Add(85*24*time.Hour))
	if err != nil || !made {
		t.Fatalf("near expiry: made %v, %v", made, err)
	}
	if after := readDir(t, dir); after[devServerCertFile] == got[devServerCertFile] {
		t.Fatal("near expiry: the server certificate was not renewed")
	}

	// Signed by another CA (infra.sh's made anew), they are made again.
	other := devCADir(t, now)
	if made, err := devTLS(other, dir, "dev", now.Add(24*time.Hour)); err != nil || !made {
		t.Fatalf("another CA: made %v, %v", made, err)
	}
	if !maps.Equal(readDir(t, caDir), caBefore) {
		t.Fatal("the CA's directory changed")
	}
}

// TestDevTLSRefuses: no CA, an unreadable one or a certificate that is no
// CA, and bad flags, each a clear error naming what to fix, nothing
// written.
func TestDevTLSRefuses(t *testing.T) {
	now := time.Now()
	caDir := devCADir(t, now)
	leafDir := t.TempDir()
	if _, err := devTLS(caDir, leafDir, "dev", now); err != nil {
		t.Fatal(err)
	}
	notCA := t.TempDir()
	for src, dst := range map[string]string{devServerCertFile: devCAFile, devServerKeyFile: devCAKeyFile} {
		b, err := os.ReadFile(filepath.Join(leafDir, src))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(notCA, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "--ca-dir is required"},
		{[]string{"--ca-dir", caDir, "--dir", ""}, 2, "--dir and --client-name must not be empty"},
		{[]string{"--ca-dir", caDir, "extra"}, 2, "takes no arguments"},
		{[]string{"--ca-dir", caDir, "--dir", caDir + "/."}, 2, "is --ca-dir"},
		{[]string{"--ca-dir", t.TempDir()}, 1, "deploy/local/infra.sh up makes them"},
		{[]string{"--ca-dir", notCA}, 1, "is not a CA certificate"},
	} {
		dir := filepath.Join(t.TempDir(), "tls")
		var out, errOut strings.Builder
		args := c.args
		if !slices.Contains(args, "--dir") {
			args = append(slices.Clone(args), "--dir", dir)
		}
		code := devTLSMain(args, &out, &errOut, now)
		if code != c.code || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%q: exit %d %q, want %d and %q", c.args, code, errOut.String(), c.code, c.want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%q: wrote %s (%v)", c.args, dir, err)
		}
	}
}
