package main

// token hash: the argon2id hash of a bootstrap token, for the api's
// --tokens-file. The token is read from stdin or made here, never taken
// as an argument: argv is readable by every user of the machine (ps).

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sundialhq/sundial/pkg/domain/auth"
)

// bootstrapPrefix starts the tokens --generate makes, so a secret scanner
// can tell them; never "sdl_", which is the api-made tokens' own.
const bootstrapPrefix = "sdb_"

type tokenHashOpts struct {
	principal string
	generate  bool
}

func (o *tokenHashOpts) register(fs *flag.FlagSet, _ *env) {
	fs.StringVar(&o.principal, "principal", "", "who the token stands for: tenant, tenant:name or tenant:name:role (role admin, read-only or operator); given, the output is the whole tokens-file line")
	fs.BoolVar(&o.generate, "generate", false, "make a random token (32 bytes) instead of reading one from stdin, and print it")
}

func runTokenHash(_ context.Context, e *env, o *tokenHashOpts, args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(e.io.Stderr, "schedctl token hash: "+format+"\n", a...)
		return 2
	}
	if len(args) != 0 {
		return fail("takes no arguments (the token is read from stdin, never from the command line, where ps shows it); got %d", len(args))
	}
	if o.principal != "" {
		if _, err := auth.ParsePrincipal(o.principal); err != nil {
			return fail("--principal: %v", err)
		}
	}
	var token string
	if o.generate {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fail("%v", err)
		}
		token = bootstrapPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	} else {
		in := e.io.Stdin
		if in == nil {
			in = os.Stdin
		}
		line, err := bufio.NewReader(io.LimitReader(in, 4096)).ReadString('\n')
		if err != nil && err != io.EOF {
			return fail("reading stdin: %v", err)
		}
		token = strings.TrimSpace(line)
		switch {
		case token == "":
			return fail("no token on stdin: pipe one in (printf %%s TOKEN | schedctl token hash), or use --generate")
		case strings.HasPrefix(token, "sdl_"):
			return fail("tokens starting with sdl_ are the api's own (schedctl token create); a bootstrap token must not look like one")
		case strings.ContainsAny(token, " \t,="):
			return fail("the token must not hold spaces, commas or '='")
		}
	}
	hash, err := auth.HashToken(token, auth.BootstrapHashParams)
	if err != nil {
		return fail("%v", err)
	}
	if o.generate {
		fmt.Fprintf(e.io.Stdout, "token: %s\n", token)
	}
	if o.principal == "" {
		fmt.Fprintln(e.io.Stdout, hash)
		return 0
	}
	// Single quotes: a YAML key holding '$' and ',' stays one plain
	// string, and a hash holds no quote.
	fmt.Fprintf(e.io.Stdout, "'%s': '%s'\n", hash, o.principal)
	return 0
}
