//go:build integration

package main

import (
	"crypto/tls"
	"crypto/x509"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// TestDevTLSWithTheInfraCA signs the api's certificates with the CA that
// deploy/local/infra.sh made for the components' secure listeners, and
// checks that one CA file verifies both: a server on dev-tls's tls.crt
// (which also requires dev-tls's client certificate) and the secure Redis
// listener. The CA's directory is left as it was.
func TestDevTLSWithTheInfraCA(t *testing.T) {
	caFile := testinfra.SecureCAFile(t)
	caDir := filepath.Dir(caFile)
	caBefore := readDir(t, caDir)
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", caFile)
	}

	dir := filepath.Join(t.TempDir(), "tls")
	var out, errOut strings.Builder
	if code := devTLSMain([]string{"--ca-dir", caDir, "--dir", dir, "--client-name", "it"}, &out, &errOut, time.Now()); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	server, err := tls.LoadX509KeyPair(filepath.Join(dir, devServerCertFile), filepath.Join(dir, devServerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	client, err := tls.LoadX509KeyPair(filepath.Join(dir, devClientCertFile), filepath.Join(dir, devClientKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	srv := tlstest.MutualTLSServer(t, server, roots)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{client}, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(srv.URL)
	if err != nil {
		t.Fatalf("the api's certificate, verified with %s: %v", caFile, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", resp.StatusCode)
	}

	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", testinfra.SecureRedisAddr(t), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("the secure Redis listener, verified with the same %s: %v", caFile, err)
	}
	conn.Close()

	if after := readDir(t, caDir); !maps.Equal(after, caBefore) {
		t.Fatalf("dev-tls changed the CA's directory %s", caDir)
	}
}
