package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// The network port requires TLS (and here a client certificate); the
// in-process connection the HTTP gateway uses reaches the same handlers
// and interceptors without either, and a token is still required on it.
func TestLocalConnectionBypassesTLSButNotAuth(t *testing.T) {
	ca := tlstest.NewCA(t, "api")
	clientCert := ca.Client("deployer", "deployer")
	tokens, err := auth.NewTokens(map[string]string{"tok": "acme"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewGRPC(GRPCConfig{Addr: "127.0.0.1:0", Tokens: tokens, Jobs: newService(t, untouchable{t: t}), TLS: &tls.Config{
		Certificates: []tls.Certificate{ca.Server("api").Pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A dial before Start waits for the server rather than failing.
	early := make(chan error, 1)
	go func() {
		c, err := srv.DialLocal(ctx)
		if err == nil {
			_ = c.Close()
		}
		early <- err
	}()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if err := <-early; err != nil {
		t.Fatalf("a dial before Start: %v", err)
	}

	preview := &sundialv1.PreviewScheduleRequest{Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@hourly"}}}
	call := func(conn *grpc.ClientConn, opts ...grpc.CallOption) (*peer.Peer, error) {
		var p peer.Peer
		_, err := sundialv1.NewJobServiceClient(conn).PreviewSchedule(ctx, preview, append(opts, grpc.Peer(&p))...)
		return &p, err
	}
	local, err := grpc.NewClient("passthrough:///in-process", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return srv.DialLocal(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	if _, err := call(local, grpc.PerRPCCredentials(auth.Bearer("tok"))); err != nil {
		t.Fatalf("in-process call with a token: %v", err)
	}
	if _, err := call(local); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("in-process call without a token: %v", err)
	}

	tlsClient, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{clientCert.Pair},
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer tlsClient.Close()
	p, err := call(tlsClient, grpc.PerRPCCredentials(auth.Bearer("tok")))
	if err != nil {
		t.Fatalf("network call over mutual TLS: %v", err)
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); !ok || info.State.PeerCertificates[0].Subject.CommonName != "localhost" {
		t.Fatalf("the network call did not go over TLS to the api's certificate: %#v", p.AuthInfo)
	}
	plain, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := call(plain, grpc.PerRPCCredentials(auth.Bearer("tok"))); err == nil {
		t.Fatal("a plaintext network call reached the server")
	}

	srv.Stop()
	if _, err := srv.DialLocal(ctx); !errors.Is(err, errLocalClosed) {
		t.Fatalf("a dial after Stop: %v", err)
	}
}
