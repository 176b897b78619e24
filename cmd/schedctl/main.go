// Command schedctl is Sundial's command line.
//
//	schedctl COMMAND [flags] [args]
//
// `schedctl preview` computes a schedule's next instants offline, with the
// same engine the services use (pkg/domain/schedule); the other subcommands talk to
// a running api over gRPC (remote.go). `schedctl help` lists them all, and
// `schedctl COMMAND -h` shows a command's flags. Exit status: 0 success, 1
// the work failed (an api call, writing output), 2 a mistake on the command
// line, including an expression that does not parse.
//
// Every command is one row of the table in commands.go; the help, the shell
// completion and the reference page docs/cli.md are generated from it.
// After changing a command or a flag, regenerate the page with `go
// generate` or `make cli-doc`; a unit test fails until it is done.
//
//go:generate go test -count=1 -run TestCLIReference -update .
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"time"
)

func main() {
	cio := osIO()
	os.Exit(runCLI(os.Args[1:], cio.Stdout, cio.Stderr))
}

// runCLI runs one invocation (args without the program name) and returns
// its exit status. Everything main does beyond os.Exit happens here, so
// tests drive the real command line without a process.
func runCLI(args []string, stdout, stderr io.Writer) int {
	// Ctrl-C cancels an in-flight api call instead of killing the process
	// mid-write.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	e := &env{io: cmdIO{Stdout: stdout, Stderr: stderr, Getenv: os.Getenv, Now: time.Now}, now: time.Now}
	return e.run(ctx, args)
}

// env is what every command gets from main: its streams and environment,
// and the clock (so `preview`'s default --from is testable).
type env struct {
	io  cmdIO
	now func() time.Time
}
