package connsec_test

import (
	"crypto/tls"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/testkit/logbuf"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

func loadServerTLS(t *testing.T, args ...string) (connsec.ServerTLS, error) {
	t.Helper()
	var s connsec.ServerTLS
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.Register(fs, "the api's ports")
	require.NoError(t, config.Load(fs, args, func(string) (string, bool) { return "", false }))
	var p config.Problems
	s.Validate(&p)
	return s, p.Err()
}

func TestServerTLSValidateNamesTheFlag(t *testing.T) {
	ca := tlstest.NewCA(t, "srv")
	srv := ca.Server("srv")
	other := tlstest.NewCA(t, "other").Server("other")
	notPEM := writeFile(t, "ca.pem", "not a certificate")
	cases := map[string]struct {
		args []string
		want string
	}{
		"key without certificate":  {[]string{"--tls-key-file", srv.KeyFile}, "tls-cert-file: required with --tls-key-file"},
		"certificate without key":  {[]string{"--tls-cert-file", srv.CertFile}, "tls-key-file: required with --tls-cert-file"},
		"certificate of other key": {[]string{"--tls-cert-file", srv.CertFile, "--tls-key-file", other.KeyFile}, "tls-cert-file: "},
		"missing certificate":      {[]string{"--tls-cert-file", "/nonexistent.crt", "--tls-key-file", srv.KeyFile}, "tls-cert-file: open /nonexistent.crt"},
		"client CA not PEM":        {[]string{"--tls-cert-file", srv.CertFile, "--tls-key-file", srv.KeyFile, "--tls-client-ca-file", notPEM}, "tls-client-ca-file: " + notPEM + " holds no PEM certificate"},
		"client CA without TLS":    {[]string{"--tls-client-ca-file", ca.CertFile}, "tls-client-ca-file: has no effect without --tls-cert-file"},
		"min version without TLS":  {[]string{"--tls-min-version", "1.3"}, "tls-min-version: has no effect without --tls-cert-file"},
		"unknown min version":      {[]string{"--tls-cert-file", srv.CertFile, "--tls-key-file", srv.KeyFile, "--tls-min-version", "1.1"}, `tls-min-version: must be 1.2 or 1.3, got "1.1"`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := loadServerTLS(t, c.args...)
			require.ErrorContains(t, err, c.want)
		})
	}
	s, err := loadServerTLS(t, "--tls-cert-file", srv.CertFile, "--tls-key-file", srv.KeyFile, "--tls-client-ca-file", ca.CertFile, "--tls-min-version", "1.3")
	require.NoError(t, err)
	require.True(t, s.Enabled())
	s, err = loadServerTLS(t)
	require.NoError(t, err)
	require.False(t, s.Enabled(), "the default is plaintext")
}

// serveTLS accepts TLS connections with cfg on loopback and completes
// each handshake; it returns the address.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				_ = c.(*tls.Conn).Handshake()
				// Hold the connection until the client has read the
				// server's verdict on its certificate (TLS 1.3 sends
				// it after the client's Finished), then close.
				_, _ = c.Read(make([]byte, 1))
				_ = c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// handshake handshakes with addr and reads once, so that a refusal the server
// sends after the client's half of the handshake (TLS 1.3) is seen too.
func handshake(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte{0}); err != nil {
		return tls.ConnectionState{}, err
	}
	if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, io.EOF) {
		return tls.ConnectionState{}, err
	}
	return c.ConnectionState(), nil
}

func TestServerCertsServeAndVerifyClients(t *testing.T) {
	ca := tlstest.NewCA(t, "api")
	srv := ca.Server("api")
	client := ca.Client("client", "deployer")
	stranger := tlstest.NewCA(t, "stranger").Client("stranger", "deployer")

	plain, err := connsec.ServerTLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile}.Load(nil)
	require.NoError(t, err)
	require.False(t, plain.MutualTLS())
	addr := serveTLS(t, plain.Config("h2"))

	st, err := handshake(addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", NextProtos: []string{"h2"}})
	require.NoError(t, err)
	require.Equal(t, "h2", st.NegotiatedProtocol, "ALPN offers what Config was given")
	_, err = handshake(addr, &tls.Config{ServerName: "localhost"}) // the system roots only
	require.ErrorContains(t, err, "certificate signed by unknown authority")
	_, err = handshake(addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "api.example.com"})
	require.ErrorContains(t, err, "not api.example.com")

	mutual, err := connsec.ServerTLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.CertFile, MinVersion: "1.3"}.Load(nil)
	require.NoError(t, err)
	require.True(t, mutual.MutualTLS())
	addr = serveTLS(t, mutual.Config("h2"))
	base := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
	withCert := func(c tlstest.Issued) *tls.Config {
		cfg := base.Clone()
		// Sent whatever CAs the server asks for, so the server's own
		// verification is what is tested.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c.Pair, nil }
		return cfg
	}
	_, err = handshake(addr, withCert(client))
	require.NoError(t, err)
	_, err = handshake(addr, base)
	require.ErrorContains(t, err, "certificate required", "no client certificate")
	_, err = handshake(addr, withCert(stranger))
	require.ErrorContains(t, err, "unknown certificate authority", "a client certificate of another CA")
	old := base.Clone()
	old.MaxVersion = tls.VersionTLS12
	_, err = handshake(addr, old)
	require.ErrorContains(t, err, "protocol version", "--tls-min-version 1.3")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	// Written beside and renamed over, as the kubelet swaps a Secret's
	// files: a reader never sees half a file.
	tmp := to + ".tmp"
	require.NoError(t, os.WriteFile(tmp, b, 0o600))
	require.NoError(t, os.Rename(tmp, to))
}

// A renewed certificate, and a renewed client CA bundle, are served by the
// next handshake without a restart; files that do not load keep the
// previous ones serving, and say so in the log.
func TestServerCertsReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	first := tlstest.NewCA(t, "first")
	second := tlstest.NewCA(t, "second")
	initial := first.Server("a")
	copyFile(t, initial.CertFile, certFile)
	copyFile(t, initial.KeyFile, keyFile)
	copyFile(t, first.CertFile, caFile)
	var logs logbuf.Buffer
	sc, err := connsec.ServerTLS{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}.Load(slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	addr := serveTLS(t, sc.Config())

	trusting := func(ca *tlstest.CA, client tlstest.Issued) *tls.Config {
		return &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost",
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &client.Pair, nil }}
	}
	firstClient, secondClient := first.Client("c1", "one"), second.Client("c2", "two")
	_, err = handshake(addr, trusting(first, firstClient))
	require.NoError(t, err)

	// Renewed by another CA: the key first, then the certificate. In
	// between, the pair does not match and the old one keeps serving.
	renewed := second.Server("b")
	copyFile(t, renewed.KeyFile, keyFile)
	_, err = handshake(addr, trusting(first, firstClient))
	require.NoError(t, err, "a half-rotated pair must not take the listener down")
	require.Contains(t, logs.String(), "tls files changed but do not load")
	copyFile(t, renewed.CertFile, certFile)
	_, err = handshake(addr, trusting(first, firstClient))
	require.ErrorContains(t, err, "unknown authority", "the new certificate is served")
	serial := renewed.Pair.Leaf.SerialNumber.Text(16)
	require.Contains(t, logs.String(), "serial="+serial)
	require.Equal(t, serial, sc.Leaf().SerialNumber.Text(16))

	// The client CAs: second's clients are refused until its CA is in the
	// bundle, then accepted, without a restart.
	_, err = handshake(addr, trusting(second, secondClient))
	require.ErrorContains(t, err, "unknown certificate authority")
	both, err := os.ReadFile(first.CertFile)
	require.NoError(t, err)
	more, err := os.ReadFile(second.CertFile)
	require.NoError(t, err)
	tmp := filepath.Join(dir, "bundle")
	require.NoError(t, os.WriteFile(tmp, append(both, more...), 0o600))
	copyFile(t, tmp, caFile)
	_, err = handshake(addr, trusting(second, secondClient))
	require.NoError(t, err)
	_, err = handshake(addr, trusting(second, firstClient))
	require.NoError(t, err, "the old CA's clients still pass during the overlap")
	require.NotContains(t, logs.String(), "PRIVATE KEY")
}

func TestServerTLSLoadFailsWithoutCertificate(t *testing.T) {
	_, err := connsec.ServerTLS{}.Load(nil)
	require.Error(t, err)
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9090": true, "127.1.2.3:9090": true, "[::1]:9090": true, "localhost:9090": true, "LOCALHOST:1": true,
		"0.0.0.0:9090": false, ":9090": false, "[::]:9090": false, "10.0.0.1:9090": false, "api.example.com:443": false,
		"dns:///api:9090": false, "127.0.0.1": true,
	} {
		require.Equal(t, want, connsec.IsLoopback(addr), addr)
	}
}
