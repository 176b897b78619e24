package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// The files `sundial-api dev-tls` writes in its directory (services/api
// devtls.go), signed by the development CA (Infra.CAFile): the harness
// serves and verifies with the same ones a developer's `make run` does, so
// the certificates the tests trust are made by the binary under test and
// by no second generator or CA here.
const (
	tlsServerCertFile = "tls.crt"
	tlsServerKeyFile  = "tls.key"
	tlsClientCertFile = "client.crt"
	tlsClientKeyFile  = "client.key"
)

// TLSMode is how the api's gRPC and HTTP ports are secured.
type TLSMode int

const (
	// Plaintext: no TLS, as a loopback-only api may run.
	Plaintext TLSMode = iota
	// TLS: the api serves a certificate signed by the development CA
	// (Infra.CAFile) and every client here verifies it.
	TLS
	// MutualTLS: TLS, and the api also requires a client certificate
	// signed by that CA on both ports, which every client here presents.
	MutualTLS
)

func (m TLSMode) String() string {
	switch m {
	case Plaintext:
		return "plaintext"
	case TLS:
		return "tls"
	case MutualTLS:
		return "mtls"
	}
	return fmt.Sprintf("TLSMode(%d)", int(m))
}

// ParseTLSMode reads "plaintext", "tls" or "mtls" (a test's or a
// command's flag or environment variable).
func ParseTLSMode(s string) (TLSMode, error) {
	for _, m := range []TLSMode{Plaintext, TLS, MutualTLS} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("harness: TLS mode %q: want plaintext, tls or mtls", s)
}

// tlsDir signs the api's certificates in <LogDir>/tls with the development
// CA, by the api binary under test, once per platform.
func (p *Platform) tlsDir(ctx context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tls != "" {
		return p.tls, nil
	}
	if p.cfg.Infra.CAFile == "" {
		return "", fmt.Errorf("harness: Config.Infra.CAFile is empty: TLS %v needs the development CA that deploy/local/infra.sh makes (.infra/tls/ca.crt, %s)", p.cfg.TLS, EnvCAFile)
	}
	dir := filepath.Join(p.cfg.LogDir, "tls")
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.cfg.BinDir, Binary("api")), "dev-tls",
		"--ca-dir", filepath.Dir(p.cfg.Infra.CAFile), "--dir", dir, "--client-name", "harness")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("harness: sundial-api dev-tls: %w\n%s", err, out.String())
	}
	p.log.Info("api TLS certificates made", "dir", dir, "mode", p.cfg.TLS)
	p.tls = dir
	return dir, nil
}

// apiTLSArgs are the api's flags for the platform's TLS mode.
func (p *Platform) apiTLSArgs(ctx context.Context) ([]string, error) {
	if p.cfg.TLS == Plaintext {
		return nil, nil
	}
	dir, err := p.tlsDir(ctx)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--tls-cert-file", filepath.Join(dir, tlsServerCertFile),
		"--tls-key-file", filepath.Join(dir, tlsServerKeyFile),
	}
	if p.cfg.TLS == MutualTLS {
		ca := p.cfg.Infra.CAFile
		args = append(args, "--tls-client-ca-file", ca, "--http-tls-client-ca-file", ca)
	}
	return args, nil
}

// TLSMode is the platform's TLS mode.
func (p *Platform) TLSMode() TLSMode { return p.cfg.TLS }

// TLSDir is the directory of the api's certificate (tls.crt, tls.key) and
// the client certificate (client.crt, client.key), both signed by CAFile;
// empty in plaintext or before the first api started.
func (p *Platform) TLSDir() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tls
}

// CAFile is the CA that signs the api's certificate, the development CA
// (Infra.CAFile); empty in plaintext or before the first api started.
func (p *Platform) CAFile() string {
	if p.TLSDir() != "" {
		return p.cfg.Infra.CAFile
	}
	return ""
}

// clientTLS is how a client here verifies the api (the platform's CA
// only) and, under MutualTLS, the certificate it presents. It is built
// here rather than with pkg/client's TLSCredentials: testkit/testinfra
// imports this package, and pkg/client's pkg/process/connsec imports
// pkg/store/rangeleader, whose tests import testkit/testinfra.
func (p *Platform) clientTLS() (*tls.Config, error) {
	dir := p.TLSDir()
	if dir == "" {
		return nil, errors.New("harness: no api started, so no TLS certificates yet")
	}
	caFile := p.cfg.Infra.CAFile
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("harness: no certificate in %s", caFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if p.cfg.TLS == MutualTLS {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, tlsClientCertFile), filepath.Join(dir, tlsClientKeyFile))
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// transportCredentials are the gRPC credentials for the platform's mode.
func (p *Platform) transportCredentials() (credentials.TransportCredentials, error) {
	if p.cfg.TLS == Plaintext {
		return insecure.NewCredentials(), nil
	}
	cfg, err := p.clientTLS()
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// URL is the base URL of an api HTTP port the test gave as --http-addr
// (https:// under TLS), for HTTPClient.
func (p *Platform) URL(httpAddr string) string {
	if p.cfg.TLS == Plaintext {
		return "http://" + httpAddr
	}
	return "https://" + httpAddr
}

// HTTPClient is an HTTP client for the api's HTTP port (the JSON API and
// the console) that trusts the platform's CA only, and presents the client
// certificate under MutualTLS. It has no timeout: callers bound requests
// with their context.
func (p *Platform) HTTPClient() (*http.Client, error) {
	if p.cfg.TLS == Plaintext {
		return &http.Client{}, nil
	}
	cfg, err := p.clientTLS()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr}, nil
}
