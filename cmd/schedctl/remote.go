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
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// defaultAddr is where `make run` starts the api.
const defaultAddr = "127.0.0.1:9090"

// cmdIO is what a subcommand reads and writes; tests substitute them.
type cmdIO struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
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
	output  string // "table" or "json"
	timeout time.Duration
}

// outputFormats are the values of -o.
var outputFormats = []string{"table", "json"}

// connFlags are the flags every gRPC subcommand takes.
type connFlags struct {
	addr, token, output string
	timeout             time.Duration
}

func (f *connFlags) register(fs *flag.FlagSet, cio cmdIO) {
	addr := cio.Getenv("SUNDIAL_ADDR")
	if addr == "" {
		addr = defaultAddr
	}
	fs.StringVar(&f.addr, "addr", addr, "api address host:port (env SUNDIAL_ADDR)")
	fs.StringVar(&f.token, "token", cio.Getenv("SUNDIAL_TOKEN"), "bearer token naming your tenant (env SUNDIAL_TOKEN)")
	fs.StringVar(&f.output, "o", "table", "output format: table or json")
	fs.StringVar(&f.output, "output", "table", "output format: table or json (same as -o)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up on the call after this long")
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
	conn, err := grpc.NewClient(cf.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.Bearer(cf.token)),
		// A dry-run backfill of 100,000 slots answers with more than
		// gRPC's default 4 MiB.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		fmt.Fprintf(cio.Stderr, "%s: %v\n", name, err)
		return 2
	}
	defer conn.Close()
	r := &remote{io: cio, client: sundialv1.NewJobServiceClient(conn), dlq: sundialv1.NewDeadLetterServiceClient(conn),
		cals: sundialv1.NewCalendarServiceClient(conn), keys: sundialv1.NewSigningKeyServiceClient(conn),
		output: cf.output, timeout: cf.timeout}
	if err := run(ctx, r); err != nil {
		if errors.Is(err, errUsage) {
			fmt.Fprintf(cio.Stderr, "%s: %v\n", name, err)
			fs.Usage()
			return 2
		}
		printCallError(cio.Stderr, name, err)
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
