//go:build integration

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/client"
	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/logbuf"
	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// install copies from over to, through a rename, as the kubelet swaps a
// mounted Secret's files.
func install(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(to+".tmp", to); err != nil {
		t.Fatal(err)
	}
}

// TestServeBinaryTLS runs the api as a process with TLS on both ports and
// mutual TLS on the gRPC port, and calls it the ways clients do: the
// gRPC API with and without the CA and a client certificate, the Go
// client, schedctl, and the HTTP/JSON API over HTTPS. Then the certificate
// is renewed by another CA while the process runs, and the next
// connections get the new one.
func TestServeBinaryTLS(t *testing.T) {
	bin := buildBinary(t)
	dsn, _, _ := freshSchema(t)
	grpcAddr, adminAddr, httpAddr := freePort(t), freePort(t), freePort(t)

	serverCA := tlstest.NewCA(t, "sundial-api-ca")
	clientCA := tlstest.NewCA(t, "sundial-clients")
	stranger := tlstest.NewCA(t, "stranger")
	deployer := clientCA.Client("deployer", "deployer")
	impostor := stranger.Client("impostor", "deployer")
	// The files the api reads, replaced in place later.
	tlsDir := t.TempDir()
	certFile, keyFile := filepath.Join(tlsDir, "tls.crt"), filepath.Join(tlsDir, "tls.key")
	first := serverCA.Server("api-1")
	install(t, first.KeyFile, keyFile)
	install(t, first.CertFile, certFile)

	var stderr logbuf.Buffer
	cmd := exec.Command(bin,
		"--grpc-addr", grpcAddr, "--admin-addr", adminAddr, "--http-addr", httpAddr, "--postgres-dsn", dsn,
		"--tokens", "tls-token=acme", "--log-format", "text",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-client-ca-file", clientCA.CertFile,
		"--cassandra-hosts", strings.Join(testinfra.CassandraHosts(t), ","), "--cassandra-keyspace", testinfra.CassandraKeyspace(t))
	_, prefix := testinfra.Redis(t)
	cmd.Env = append(os.Environ(), "SUNDIAL_REDIS_KEY_PREFIX="+prefix)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dial := func(cfg *tls.Config) *grpc.ClientConn {
		t.Helper()
		creds := insecure.NewCredentials()
		if cfg != nil {
			creds = credentials.NewTLS(cfg)
		}
		gc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(auth.Bearer("tls-token")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = gc.Close() })
		return gc
	}
	presenting := func(roots *tls.Config, c *tlstest.Issued) *tls.Config {
		cfg := roots.Clone()
		if c != nil {
			pair := c.Pair
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
		}
		return cfg
	}
	trusting := &tls.Config{RootCAs: serverCA.Pool()}
	good := dial(presenting(trusting, &deployer))
	for {
		h, err := healthpb.NewHealthClient(good).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("api exited: %v\n%s", err, stderr.String())
		case <-ctx.Done():
			t.Fatalf("api never became SERVING over TLS: %v\n%s", err, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !strings.Contains(stderr.String(), "tls on the gRPC and HTTP ports") || !strings.Contains(stderr.String(), "grpc_client_certificates=true") {
		t.Fatalf("the api did not say how it serves:\n%s", stderr.String())
	}

	jobs := sundialv1.NewJobServiceClient(good)
	created, err := jobs.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{
		Name:     "over-tls",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@hourly"}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "t"}}},
	}})
	if err != nil || created.GetJob().GetTenant() != "acme" {
		t.Fatalf("CreateJob over mutual TLS: %v %v", created, err)
	}
	id := created.GetJob().GetId()

	// Refused during the handshake, before a token is read: no CA, no
	// client certificate, a client certificate of another CA, plaintext.
	// (The client certificate is checked after TLS 1.3 lets the client
	// finish its side: refusing a missing or foreign one reaches the
	// client as the alert or as the connection closing under its first
	// write, whichever it reads first.)
	refused := []struct {
		what string
		conn *grpc.ClientConn
		want string // in the error; "" for any Unavailable
	}{
		{"no CA", dial(presenting(&tls.Config{}, &deployer)), "certificate signed by unknown authority"},
		{"no client certificate", dial(presenting(trusting, nil)), ""},
		{"a client certificate of another CA", dial(presenting(trusting, &impostor)), ""},
		{"plaintext", dial(nil), ""},
	}
	for _, r := range refused {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := sundialv1.NewJobServiceClient(r.conn).GetJob(cctx, &sundialv1.GetJobRequest{Id: id})
		ccancel()
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), r.want) {
			t.Errorf("%s: got %v, want Unavailable with %q", r.what, err, r.want)
		}
	}

	// The Go client, verifying with the CA and presenting its certificate.
	creds, err := client.TLSCredentials(client.TLSFiles{CAFile: serverCA.CertFile, CertFile: deployer.CertFile, KeyFile: deployer.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	gcl, err := client.New(grpcAddr, "tls-token", client.WithTLS(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer gcl.Close()
	if job, err := gcl.GetJob(ctx, id); err != nil || job.GetName() != "over-tls" {
		t.Fatalf("the Go client over mutual TLS: %v %v", job, err)
	}

	// schedctl: verifies with --ca, presents --tls-cert; without the CA it
	// is refused and told what to pass.
	schedctl := filepath.Join(t.TempDir(), "schedctl")
	if out, err := exec.Command("go", "build", "-o", schedctl, "../../cmd/schedctl").CombinedOutput(); err != nil {
		t.Fatalf("build schedctl: %v\n%s", err, out)
	}
	run := func(env ...string) (string, error) {
		c := exec.CommandContext(ctx, schedctl, "get", id, "-o", "json")
		c.Env = append([]string{"PATH=" + os.Getenv("PATH"), "SUNDIAL_ADDR=" + grpcAddr, "SUNDIAL_TOKEN=tls-token"}, env...)
		out, err := c.CombinedOutput()
		return string(out), err
	}
	withCert := []string{"SUNDIAL_TLS_CERT=" + deployer.CertFile, "SUNDIAL_TLS_KEY=" + deployer.KeyFile}
	if out, err := run(append(withCert, "SUNDIAL_CA="+serverCA.CertFile)...); err != nil || !strings.Contains(out, `"name": "over-tls"`) {
		t.Fatalf("schedctl get over mutual TLS: %v\n%s", err, out)
	}
	if out, err := run(append(withCert, "SUNDIAL_TLS=true")...); err == nil || !strings.Contains(out, "pass --ca") {
		t.Fatalf("schedctl without the CA: %v\n%s", err, out)
	}
	if out, err := run(); err == nil || !strings.Contains(out, "if the api serves TLS, pass --ca") {
		t.Fatalf("schedctl in plaintext on loopback against a TLS port: %v\n%s", err, out)
	}
	if out, err := run("SUNDIAL_CA=" + serverCA.CertFile); err == nil || !strings.Contains(out, "pass --tls-cert and --tls-key") {
		t.Fatalf("schedctl without a client certificate: %v\n%s", err, out)
	}

	// HTTPS on the HTTP port, HTTP/2 included; no client certificate asked
	// for there (--http-tls-client-ca-file is unset).
	httpsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: serverCA.Pool()}, ForceAttemptHTTP2: true}}
	defer httpsClient.CloseIdleConnections()
	get := func(c *http.Client, url string) (*http.Response, string, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer tls-token")
		resp, err := c.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b), nil
	}
	resp, body, err := get(httpsClient, "https://"+httpAddr+"/v1/jobs/"+id)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(body, id) || resp.ProtoMajor != 2 {
		t.Fatalf("GET /v1/jobs/ID over HTTPS: %v %v %s", resp, err, body)
	}
	if resp, body, err := get(http.DefaultClient, "http://"+httpAddr+"/v1/jobs/"+id); err != nil || resp.StatusCode != 400 || strings.Contains(body, id) {
		t.Fatalf("plain HTTP to the HTTPS port: %v %v %s", resp, err, body)
	}
	if _, _, err := get(&http.Client{Transport: &http.Transport{}}, "https://"+httpAddr+"/v1/jobs/"+id); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("HTTPS without the CA: %v", err)
	}

	// Renewal by another CA while the api runs: the key, then the
	// certificate, as a rotation writes them. New connections get the new
	// certificate; no restart.
	renewedCA := tlstest.NewCA(t, "sundial-api-ca-2")
	renewed := renewedCA.Server("api-2")
	install(t, renewed.KeyFile, keyFile)
	install(t, renewed.CertFile, certFile)
	fresh := func(roots *tls.Config) error {
		gc := dial(presenting(roots, &deployer))
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		_, err := sundialv1.NewJobServiceClient(gc).GetJob(cctx, &sundialv1.GetJobRequest{Id: id})
		return err
	}
	if err := fresh(&tls.Config{RootCAs: renewedCA.Pool()}); err != nil {
		t.Fatalf("a new connection trusting the renewing CA: %v\n%s", err, stderr.String())
	}
	if err := fresh(trusting); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("a new connection trusting only the first CA: %v", err)
	}
	if _, err := jobs.GetJob(ctx, &sundialv1.GetJobRequest{Id: id}); err != nil {
		t.Fatalf("the connection opened before the renewal: %v", err)
	}
	renewedHTTPS := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: renewedCA.Pool()}}}
	if resp, _, err := get(renewedHTTPS, "https://"+httpAddr+"/v1/jobs/"+id); err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTPS after the renewal: %v %v", resp, err)
	}
	// The expiry gauge follows the certificate served.
	metrics, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	scraped, _ := io.ReadAll(metrics.Body)
	_ = metrics.Body.Close()
	for _, port := range []string{"grpc", "http"} {
		series := fmt.Sprintf(`sundial_api_tls_certificate_expiry_timestamp_seconds{port=%q} `, port)
		_, value, found := strings.Cut(string(scraped), series)
		value, _, _ = strings.Cut(value, "\n")
		got, err := strconv.ParseFloat(value, 64)
		if !found || err != nil || int64(got) != renewed.Pair.Leaf.NotAfter.Unix() {
			t.Errorf("/metrics: %s%q, want the renewed certificate's expiry %d", series, value, renewed.Pair.Leaf.NotAfter.Unix())
		}
	}
	logs := stderr.String()
	if !strings.Contains(logs, "tls files reloaded") || !strings.Contains(logs, renewed.Pair.Leaf.SerialNumber.Text(16)) {
		t.Fatalf("the reload is not in the log:\n%s", logs)
	}
	for _, secret := range []string{"PRIVATE KEY", "tls-token"} {
		if strings.Contains(logs, secret) {
			t.Fatalf("the log holds %q:\n%s", secret, logs)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("api exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("api did not stop on SIGTERM\n%s", stderr.String())
	}
}

// A port that is not loopback does not serve plaintext unless told to.
func TestRefusesPlaintextOffLoopback(t *testing.T) {
	bin := buildBinary(t)
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--grpc-addr", "0.0.0.0:0", "--admin-addr", freePort(t), "--tokens", "t=acme")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "tls-cert-file: required: --grpc-addr 0.0.0.0:0 is not a loopback address") {
		t.Fatalf("plaintext on 0.0.0.0: %v\n%s", err, stderr.String())
	}
}
