package httpapi

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialhq/sundial/testkit/logbuf"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// With TLS the HTTP port serves HTTPS, HTTP/2 included; a client that
// does not speak TLS gets 400 and the failed handshake is logged at debug
// only, since load balancers' TCP checks make one every few seconds.
func TestServesHTTPS(t *testing.T) {
	ca := tlstest.NewCA(t, "api")
	conn, err := grpc.NewClient("passthrough:///unused", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	srv, err := New(Config{Addr: "127.0.0.1:0", Conn: conn, StopTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		TLS:    &tls.Config{Certificates: []tls.Certificate{ca.Server("api").Pair}, NextProtos: []string{"h2", "http/1.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	get := func(c *http.Client, url string) (*http.Response, string) {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}}
	defer https.CloseIdleConnections()
	resp, body := get(https, "https://"+srv.Addr()+"/v1/openapi.json")
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || resp.TLS == nil || !strings.Contains(body, `"swagger"`) {
		t.Fatalf("HTTPS: %d %s %v", resp.StatusCode, resp.Proto, resp.TLS)
	}
	if resp, _ := get(http.DefaultClient, "http://"+srv.Addr()+"/v1/openapi.json"); resp.StatusCode != 400 {
		t.Fatalf("plain HTTP to the HTTPS port: %d", resp.StatusCode)
	}
	srv.Stop()
	out := logs.String()
	if !strings.Contains(out, "level=DEBUG msg=\"http server error\"") || strings.Contains(out, "level=WARN") {
		t.Fatalf("the failed handshake was not logged at debug only:\n%s", out)
	}
}
