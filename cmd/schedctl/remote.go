package main

// The gRPC subcommands of schedctl: they talk to a running api. Each is a
// remoteCmd row of the command table (commands.go), run through runRemote.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/connsec"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// defaultAddr is where `make run` starts the api.
const defaultAddr = "127.0.0.1:9090"

// cmdIO is what a subcommand reads and writes; tests substitute them.
type cmdIO struct {
	Stdout, Stderr io.Writer
	// Stdin is what a command reads a secret from; nil is os.Stdin.
	Stdin  io.Reader
	Getenv func(string) string
	// Now is the clock relative instants ("--since 24h") count back from;
	// nil is the real one.
	Now func() time.Time
}

func osIO() cmdIO { return cmdIO{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv} }

func (c cmdIO) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// remote is a connected client plus the output settings of one invocation.
type remote struct {
	io      cmdIO
	client  sundialv1.JobServiceClient
	dlq     sundialv1.DeadLetterServiceClient
	cals    sundialv1.CalendarServiceClient
	keys    sundialv1.SigningKeyServiceClient
	tokens  sundialv1.TokenServiceClient
	fcast   sundialv1.ForecastServiceClient
	audit   sundialv1.AuditServiceClient
	output  string // "table" or "json"
	timeout time.Duration
}

// outputFormats are the values of -o.
var outputFormats = []string{"table", "json"}

// connFlags are the flags every gRPC subcommand takes.
type connFlags struct {
	addr, token, output string
	// tenant is the tenant a platform operator's calls act on (the
	// sundial-tenant header); "" for the token's own.
	tenant  string
	timeout time.Duration
	// TLS towards the api: forced on (useTLS) or off (plaintext), the CA
	// bundle, the name the certificate must carry, and a client
	// certificate for an api that requires one.
	useTLS, plaintext bool
	ca, serverName    string
	certFile, keyFile string
	envProblem        error // a SUNDIAL_TLS or SUNDIAL_PLAINTEXT that is not a boolean
}

func (f *connFlags) register(fs *flag.FlagSet, cio cmdIO) {
	addr := cio.Getenv("SUNDIAL_ADDR")
	if addr == "" {
		addr = defaultAddr
	}
	fs.StringVar(&f.addr, "addr", addr, "api address host:port (env SUNDIAL_ADDR)")
	fs.StringVar(&f.token, "token", cio.Getenv("SUNDIAL_TOKEN"), "bearer token naming your tenant (env SUNDIAL_TOKEN)")
	fs.StringVar(&f.tenant, "tenant", cio.Getenv("SUNDIAL_TENANT"), "platform operators: the tenant to read (and whose dead letters to re-drive); a tenant's token may name only its own (env SUNDIAL_TENANT)")
	fs.StringVar(&f.output, "o", "table", "output format: table or json")
	fs.StringVar(&f.output, "output", "table", "output format: table or json (same as -o)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up on the call after this long")
	fs.StringVar(&f.ca, "ca", cio.Getenv("SUNDIAL_CA"), "PEM file of the CAs that sign the api's certificate; implies TLS (env SUNDIAL_CA)")
	fs.StringVar(&f.serverName, "tls-server-name", cio.Getenv("SUNDIAL_TLS_SERVER_NAME"), "name the api's certificate must carry, when it is not the host of --addr (a port-forward, an IP); implies TLS (env SUNDIAL_TLS_SERVER_NAME)")
	fs.StringVar(&f.certFile, "tls-cert", cio.Getenv("SUNDIAL_TLS_CERT"), "PEM client certificate, for an api that requires one (mutual TLS), with --tls-key; implies TLS (env SUNDIAL_TLS_CERT)")
	fs.StringVar(&f.keyFile, "tls-key", cio.Getenv("SUNDIAL_TLS_KEY"), "PEM key of --tls-cert (env SUNDIAL_TLS_KEY)")
	f.useTLS = f.envBool(cio, "SUNDIAL_TLS")
	f.plaintext = f.envBool(cio, "SUNDIAL_PLAINTEXT")
	fs.BoolVar(&f.useTLS, "tls", f.useTLS, "use TLS, verifying the api's certificate against the system's CAs (or --ca); the default for an --addr that is not loopback (env SUNDIAL_TLS)")
	fs.BoolVar(&f.plaintext, "plaintext", f.plaintext, "no TLS, whatever --addr: the token crosses the path readable (the default on loopback only; env SUNDIAL_PLAINTEXT)")
}

// envBool reads a boolean variable; a value that is not one is reported
// when the command runs, naming the variable.
func (f *connFlags) envBool(cio cmdIO, name string) bool {
	v := cio.Getenv(name)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil && f.envProblem == nil {
		f.envProblem = fmt.Errorf("%s=%q is not a boolean (true or false)", name, v)
	}
	return b
}

// tlsAsked reports whether any TLS setting was given.
func (f *connFlags) tlsAsked() bool {
	return f.useTLS || f.ca != "" || f.serverName != "" || f.certFile != "" || f.keyFile != ""
}

// credentials are the transport credentials for --addr: TLS when asked
// for or when the address is not loopback (a bearer token goes with every
// call), plaintext on loopback (make run, tests) or with --plaintext.
func (f *connFlags) credentials() (credentials.TransportCredentials, error) {
	if f.envProblem != nil {
		return nil, usagef("%v", f.envProblem)
	}
	if f.plaintext {
		if f.tlsAsked() {
			return nil, usagef("--plaintext contradicts --tls, --ca, --tls-server-name, --tls-cert and --tls-key (or their SUNDIAL_* variables)")
		}
		return insecure.NewCredentials(), nil
	}
	if !f.tlsAsked() && connsec.IsLoopback(f.addr) {
		return insecure.NewCredentials(), nil
	}
	switch {
	case f.certFile != "" && f.keyFile == "":
		return nil, usagef("--tls-key is required with --tls-cert")
	case f.certFile == "" && f.keyFile != "":
		return nil, usagef("--tls-cert is required with --tls-key")
	}
	cfg, err := connsec.TLS{Enabled: true, CAFile: f.ca, ServerName: f.serverName, CertFile: f.certFile, KeyFile: f.keyFile}.Config()
	if err != nil {
		return nil, usagef("--ca, --tls-cert or --tls-key: %v", err)
	}
	return credentials.NewTLS(cfg), nil
}

// transportHint explains a failure that comes from the choice of TLS or
// plaintext rather than from the api; "" when there is nothing to add.
func (f *connFlags) transportHint(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "the api answered in plaintext: pass --plaintext if that is expected (the token then crosses the path readable)"
	case strings.Contains(msg, "certificate signed by unknown authority"):
		return "the api's certificate is not signed by a CA this schedctl trusts: pass --ca with the CA's certificate (make run: .infra/tls/ca.crt)"
	case strings.Contains(msg, "certificate is valid for"), strings.Contains(msg, "doesn't contain any IP SANs"):
		return "the api's certificate does not carry the host of --addr: pass --tls-server-name with a name it carries"
	case strings.Contains(msg, "certificate required"):
		return "the api requires a client certificate: pass --tls-cert and --tls-key"
	case status.Code(err) != codes.Unavailable:
	case f.plaintext || !f.tlsAsked() && connsec.IsLoopback(f.addr):
		return "this call was plaintext: if the api serves TLS, pass --ca (make run: .infra/tls/ca.crt) or --tls"
	case f.certFile == "" && closedAfterHandshake(msg):
		// TLS 1.3 completes the client's side of the handshake before
		// the server checks for a client certificate: a refusal shows
		// as the connection closing under the first call.
		return "the api closed the connection: if it requires a client certificate, pass --tls-cert and --tls-key"
	case f.certFile != "" && (closedAfterHandshake(msg) || strings.Contains(msg, "unknown certificate authority") || strings.Contains(msg, "bad certificate")):
		return "the api closed the connection or refused the certificate of --tls-cert: is it signed by a CA the api accepts?"
	}
	return ""
}

func closedAfterHandshake(msg string) bool {
	for _, s := range []string{"broken pipe", "connection reset", "EOF"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// errUsage marks a mistake in the command line (exit status 2).
var errUsage = errors.New("usage")

type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }
func (u usageError) Is(t error) bool {
	return t == errUsage
}

func usagef(format string, args ...any) error { return usageError{msg: fmt.Sprintf(format, args...)} }

// runRemote runs one gRPC subcommand once fs has parsed its arguments:
// it checks the connection flags cf, connects and calls run, and returns the
// exit status: 0 success, 1 the call failed, 2 bad usage.
func runRemote(ctx context.Context, cio cmdIO, fs *flag.FlagSet, cf *connFlags, run func(context.Context, *remote) error) int {
	name := fs.Name() // "schedctl create"
	if !slices.Contains(outputFormats, cf.output) {
		fmt.Fprintf(cio.Stderr, "%s: -o must be table or json, got %q\n", name, cf.output)
		return 2
	}
	if cf.token == "" {
		fmt.Fprintf(cio.Stderr, "%s: no token: pass --token or set SUNDIAL_TOKEN\n", name)
		return 2
	}
	creds, err := cf.credentials()
	if err != nil {
		fmt.Fprintf(cio.Stderr, "%s: %v\n", name, err)
		return 2
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(auth.Bearer(cf.token))}
	if cf.tenant != "" {
		opts = append(opts, grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, o ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, auth.TenantHeader, cf.tenant), method, req, reply, cc, o...)
		}))
	}
	conn, err := grpc.NewClient(cf.addr, append(opts,
		// A dry-run backfill of 100,000 slots answers with more than
		// gRPC's default 4 MiB.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))...)
	if err != nil {
		fmt.Fprintf(cio.Stderr, "%s: %v\n", name, err)
		return 2
	}
	defer conn.Close()
	r := &remote{io: cio, client: sundialv1.NewJobServiceClient(conn), dlq: sundialv1.NewDeadLetterServiceClient(conn),
		cals: sundialv1.NewCalendarServiceClient(conn), keys: sundialv1.NewSigningKeyServiceClient(conn),
		tokens: sundialv1.NewTokenServiceClient(conn), fcast: sundialv1.NewForecastServiceClient(conn),
		audit: sundialv1.NewAuditServiceClient(conn), output: cf.output, timeout: cf.timeout}
	if err := run(ctx, r); err != nil {
		if errors.Is(err, errUsage) {
			fmt.Fprintf(cio.Stderr, "%s: %v\n", name, err)
			fs.Usage()
			return 2
		}
		printCallError(cio.Stderr, name, err)
		if hint := cf.transportHint(err); hint != "" {
			fmt.Fprintf(cio.Stderr, "%s: %s\n", name, hint)
		}
		return 1
	}
	return 0
}

// call bounds one RPC by the --timeout.
func (r *remote) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.timeout)
}

// parseInterspersed parses flags anywhere among the positional arguments
// (`schedctl get ID -o json` as well as `schedctl get -o json ID`); "--"
// ends flag parsing.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(args) > 0 && len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// printCallError says what the api answered, one line per field problem,
// after the command's name ("schedctl create").
func printCallError(w io.Writer, name string, err error) {
	st, ok := status.FromError(err)
	if !ok {
		fmt.Fprintf(w, "%s: %v\n", name, err)
		return
	}
	var fields []*errdetails.BadRequest_FieldViolation
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			fields = append(fields, br.GetFieldViolations()...)
		}
	}
	if len(fields) == 0 {
		fmt.Fprintf(w, "%s: %s: %s\n", name, st.Code(), st.Message())
		return
	}
	fmt.Fprintf(w, "%s: %s:\n", name, st.Code())
	for _, f := range fields {
		fmt.Fprintf(w, "  %s: %s\n", f.GetField(), f.GetDescription())
	}
}
