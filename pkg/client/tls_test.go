package client

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// serveTLS runs jobs on a loopback gRPC server with cfg's TLS.
func serveTLS(t *testing.T, jobs sundialv1.JobServiceServer, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	sundialv1.RegisterJobServiceServer(srv, jobs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() { srv.Stop(); <-done })
	return ln.Addr().String()
}

func TestTLSCredentialsVerifyTheAPI(t *testing.T) {
	ca := tlstest.NewCA(t, "api")
	server := ca.Server("api", "sundial-api.sundial.svc")
	clientCert := ca.Client("deployer", "deployer")
	addr := serveTLS(t, &flakyJobs{calls: map[string]int{}}, &tls.Config{
		Certificates: []tls.Certificate{server.Pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	})
	list := func(f TLSFiles) error {
		t.Helper()
		creds, err := TLSCredentials(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(addr, "tok-acme", WithTLS(creds), WithRetry(0, 0, -1))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = c.TriggerJob(ctx, "job-1")
		return err
	}
	good := TLSFiles{CAFile: ca.CertFile, ServerName: "sundial-api.sundial.svc", CertFile: clientCert.CertFile, KeyFile: clientCert.KeyFile}
	if err := list(good); err != nil {
		t.Fatalf("with the CA, the name and a client certificate: %v", err)
	}
	for want, f := range map[string]TLSFiles{
		"certificate signed by unknown authority": {ServerName: good.ServerName, CertFile: good.CertFile, KeyFile: good.KeyFile},
		"doesn't contain any IP SANs":             {CAFile: ca.CertFile, CertFile: good.CertFile, KeyFile: good.KeyFile},
	} {
		if err := list(f); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: got %v, want %q", f, err, want)
		}
	}
	// Without a client certificate the server refuses the connection. In TLS
	// 1.3 the client's handshake ends before the server has judged its
	// (missing) certificate, so the client learns of the refusal either from
	// the server's alert or from the closed connection its first write meets.
	noCert := TLSFiles{CAFile: ca.CertFile, ServerName: good.ServerName}
	err := list(noCert)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("%+v: got %v, want the call refused (Unavailable)", noCert, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "certificate required") &&
		!strings.Contains(msg, "broken pipe") && !strings.Contains(msg, "connection reset") && !strings.Contains(msg, "EOF") {
		t.Errorf("%+v: got %v, want the server's refusal", noCert, err)
	}
	if _, err := TLSCredentials(TLSFiles{CertFile: good.CertFile}); err == nil {
		t.Error("a client certificate without its key was accepted")
	}
	if _, err := TLSCredentials(TLSFiles{CAFile: "/nonexistent/ca.crt"}); err == nil || !strings.Contains(err.Error(), "/nonexistent/ca.crt") {
		t.Errorf("a missing CA file: %v", err)
	}
}
