package main

// TEMPORARY entry point, until the schedctl skeleton (main.go with the
// command table and the offline `preview`) lands. It dispatches only the
// gRPC subcommands. When main.go arrives, delete this file and route the
// table's entries for create/get/list/update/pause/resume/delete/trigger/
// history/server-preview through lookupRemote and runRemote (remote.go);
// remoteUsage prints their one-line summaries for the top-level help.

import (
	"context"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: schedctl COMMAND [flags] [args]\n\ncommands:")
		remoteUsage(os.Stderr)
		os.Exit(2)
	}
	c, ok := lookupRemote(os.Args[1])
	if !ok {
		fmt.Fprintf(os.Stderr, "schedctl: unknown command %q\n", os.Args[1])
		remoteUsage(os.Stderr)
		os.Exit(2)
	}
	os.Exit(runRemote(context.Background(), osIO(), c, os.Args[2:]))
}
