// Command schedctl is Sundial's command line.
//
//	schedctl COMMAND [flags] [args]
//
// `schedctl preview` computes a schedule's next instants offline, with the
// same engine the services use (pkg/schedule); the other subcommands talk to
// a running api over gRPC (remote.go). `schedctl help` lists them all, and
// `schedctl COMMAND -h` shows a command's flags. Exit status: 0 success, 1
// the work failed (an api call, writing output), 2 a mistake on the command
// line, including an expression that does not parse.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
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

// command is one row of the command table. A new subcommand is one more
// row: local commands here, gRPC ones through registerRemote.
type command struct {
	name    string
	args    string // synopsis after the name, for the help listing
	summary string
	run     func(ctx context.Context, e *env, args []string) int
}

// localCommands are the commands that need no server.
var localCommands = []command{
	{name: "preview", args: "--cron EXPR [--tz ZONE] [--from RFC3339] [--count N]",
		summary: "Print a schedule's next instants, computed offline (no server).", run: runPreview},
	{name: "sink", args: "[--addr HOST:PORT] [--signing-secret S]",
		summary: "Run a local HTTP target that prints every firing it receives (for trying Sundial out).", run: runSink},
}

// commands returns the whole table in help order: offline commands first,
// then the gRPC ones.
func commands() []command {
	cmds := append([]command(nil), localCommands...)
	for _, rc := range remoteCommands {
		cmds = append(cmds, command{name: rc.Name, args: rc.Args, summary: rc.Summary,
			run: func(ctx context.Context, e *env, args []string) int { return runRemote(ctx, e.io, rc, args) }})
	}
	return cmds
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// isGroup reports whether name is the first word of two-word commands
// ("dlq" of "dlq list").
func isGroup(name string) bool {
	for _, c := range commands() {
		if strings.HasPrefix(c.name, name+" ") {
			return true
		}
	}
	return false
}

// resolve finds the command args start with, one word or a group and its
// subcommand, and returns it with the remaining arguments.
func resolve(args []string) (command, []string, bool) {
	if len(args) == 0 {
		return command{}, nil, false
	}
	name, rest := args[0], args[1:]
	if isGroup(name) && len(rest) > 0 {
		name, rest = name+" "+rest[0], rest[1:]
	}
	c, ok := lookup(name)
	return c, rest, ok
}

// groupUsage lists a group's subcommands.
func groupUsage(w io.Writer, group string) {
	fmt.Fprintf(w, "usage: schedctl %s SUBCOMMAND [flags] [args]\n\nsubcommands:\n", group)
	for _, c := range commands() {
		if strings.HasPrefix(c.name, group+" ") {
			fmt.Fprintf(w, "  %-15s %s\n", c.name, firstLine(c.summary))
		}
	}
}

func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "-help" || arg == "--help"
}

func (e *env) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		usage(e.io.Stderr)
		return 2
	}
	if isHelp(args[0]) {
		// "schedctl help preview" is "schedctl preview -h".
		if len(args) > 1 {
			if c, _, ok := resolve(args[1:]); ok {
				return c.run(ctx, e, []string{"-h"})
			}
			if isGroup(args[1]) {
				groupUsage(e.io.Stdout, args[1])
				return 0
			}
			fmt.Fprintf(e.io.Stderr, "schedctl: unknown command %q\n\n", strings.Join(args[1:], " "))
			usage(e.io.Stderr)
			return 2
		}
		usage(e.io.Stdout)
		return 0
	}
	c, rest, ok := resolve(args)
	if !ok {
		if isGroup(args[0]) {
			switch {
			case len(args) > 1 && isHelp(args[1]):
				groupUsage(e.io.Stdout, args[0])
				return 0
			case len(args) > 1:
				fmt.Fprintf(e.io.Stderr, "schedctl: unknown command %q\n\n", args[0]+" "+args[1])
			}
			groupUsage(e.io.Stderr, args[0])
			return 2
		}
		fmt.Fprintf(e.io.Stderr, "schedctl: unknown command %q\n\n", args[0])
		usage(e.io.Stderr)
		return 2
	}
	return c.run(ctx, e, rest)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: schedctl COMMAND [flags] [args]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range localCommands {
		fmt.Fprintf(w, "  %-15s %s\n", c.name, firstLine(c.summary))
	}
	remoteUsage(w)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'schedctl COMMAND -h' for a command's flags.")
}
