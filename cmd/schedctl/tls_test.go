package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/testkit/tlstest"
)

func parseConnFlags(t *testing.T, env map[string]string, args ...string) *connFlags {
	t.Helper()
	fs := flag.NewFlagSet("schedctl list", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf := &connFlags{}
	cf.register(fs, cmdIO{Getenv: func(k string) string { return env[k] }})
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return cf
}

// Plaintext on loopback unless TLS is asked for; TLS everywhere else
// unless plaintext is.
func TestTransportChoice(t *testing.T) {
	ca := tlstest.NewCA(t, "schedctl-test").CertFile
	cases := []struct {
		env  map[string]string
		args []string
		want string // "insecure", "tls", or the start of a usage error
	}{
		{nil, nil, "insecure"}, // 127.0.0.1:9090
		{nil, []string{"--addr", "localhost:9090"}, "insecure"},
		{nil, []string{"--addr", "[::1]:9090"}, "insecure"},
		{nil, []string{"--addr", "api.example.com:9090"}, "tls"},
		{nil, []string{"--addr", "10.1.2.3:9090"}, "tls"},
		{map[string]string{"SUNDIAL_ADDR": "dns:///sundial-api:9090"}, nil, "tls"},
		{nil, []string{"--tls"}, "tls"},
		{nil, []string{"--ca", ca}, "tls"},
		{map[string]string{"SUNDIAL_CA": ca}, nil, "tls"},
		{nil, []string{"--tls-server-name", "sundial-api"}, "tls"},
		{map[string]string{"SUNDIAL_TLS": "true"}, nil, "tls"},
		{nil, []string{"--addr", "api.example.com:9090", "--plaintext"}, "insecure"},
		{map[string]string{"SUNDIAL_PLAINTEXT": "1", "SUNDIAL_ADDR": "api:9090"}, nil, "insecure"},
		{nil, []string{"--plaintext", "--ca", ca}, "--plaintext contradicts"},
		{map[string]string{"SUNDIAL_PLAINTEXT": "yes please"}, nil, `SUNDIAL_PLAINTEXT="yes please" is not a boolean`},
		{nil, []string{"--tls-cert", ca}, "--tls-key is required with --tls-cert"},
		{nil, []string{"--tls-key", ca}, "--tls-cert is required with --tls-key"},
		{nil, []string{"--ca", "/nonexistent/ca.crt"}, "--ca, --tls-cert or --tls-key: open /nonexistent/ca.crt"},
	}
	for _, c := range cases {
		cf := parseConnFlags(t, c.env, c.args...)
		creds, err := cf.credentials()
		got := ""
		if err != nil {
			if !errors.Is(err, errUsage) {
				t.Errorf("%v %q: %v is not a usage error", c.env, c.args, err)
			}
			got = err.Error()
		} else {
			got = creds.Info().SecurityProtocol
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%v %q: got %q, want %q", c.env, c.args, got, c.want)
		}
	}
}

func TestTransportHint(t *testing.T) {
	plain := parseConnFlags(t, nil)
	withCA := parseConnFlags(t, nil, "--tls")
	unavailable := status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: EOF"`)
	if h := plain.transportHint(unavailable); !strings.Contains(h, "pass --ca") {
		t.Errorf("plaintext to a TLS port: %q", h)
	}
	refused := status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:9090: connect: connection refused"`)
	if h := withCA.transportHint(refused); h != "" {
		t.Errorf("TLS call, nothing listening: %q says nothing useful", h)
	}
	for msg, want := range map[string]string{
		"tls: first record does not look like a TLS handshake":                                  "--plaintext",
		"tls: failed to verify certificate: x509: certificate signed by unknown authority":      "--ca",
		"x509: certificate is valid for localhost, not api.example.com":                         "--tls-server-name",
		"x509: cannot validate certificate for 10.0.0.1 because it doesn't contain any IP SANs": "--tls-server-name",
		"remote error: tls: certificate required":                                               "--tls-cert",
	} {
		if h := withCA.transportHint(status.Error(codes.Unavailable, msg)); !strings.Contains(h, want) {
			t.Errorf("%s: hint %q lacks %s", msg, h, want)
		}
	}
	if h := withCA.transportHint(status.Error(codes.Unavailable, "write tcp 127.0.0.1:1->127.0.0.1:2: write: broken pipe")); !strings.Contains(h, "--tls-cert") {
		t.Errorf("a TLS 1.3 refusal of a missing client certificate: %q", h)
	}
	withCert := parseConnFlags(t, nil, "--tls-cert", "c.crt", "--tls-key", "c.key")
	for _, msg := range []string{"write: connection reset by peer", "remote error: tls: unknown certificate authority"} {
		if h := withCert.transportHint(status.Error(codes.Unavailable, msg)); !strings.Contains(h, "certificate of --tls-cert") {
			t.Errorf("a refused client certificate (%s): %q", msg, h)
		}
	}
	if h := plain.transportHint(status.Error(codes.NotFound, "job not found")); h != "" {
		t.Errorf("an answer of the api got a transport hint: %q", h)
	}
}
