package main

// `schedctl completion bash|zsh`: shell completion scripts written from the
// command table, so a new command or flag completes as soon as it exists.
// The scripts are static (they do not call schedctl back): they complete
// command names, then the command's flags, the words of a positional
// argument or a flag's value chosen from a list (completion's shell,
// --priority, -o), and files as the value of any other flag that takes one
// (-f job.yaml, --payload-file).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

func runCompletion(_ context.Context, e *env, _ *noOpts, args []string) int {
	if len(args) != 1 {
		fmt.Fprintf(e.io.Stderr, "schedctl completion: want one shell, bash or zsh, got %d arguments\n", len(args))
		return 2
	}
	var err error
	switch args[0] {
	case "bash":
		err = writeBash(e.io.Stdout, commands())
	case "zsh":
		err = writeZsh(e.io.Stdout, commands())
	default:
		fmt.Fprintf(e.io.Stderr, "schedctl completion: unknown shell %q (want bash or zsh)\n", args[0])
		return 2
	}
	if err != nil {
		fmt.Fprintf(e.io.Stderr, "schedctl completion: %v\n", err)
		return 1
	}
	return 0
}

// canonicalEnv is the environment generated text is written in: no
// SUNDIAL_* variables, so flag defaults are the built-in ones, and neither
// docs/cli.md nor a completion script can pick up the caller's token.
func canonicalEnv() *env {
	return &env{io: cmdIO{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}, now: time.Now}
}

// flags lists c's flags in name order, the connection flags included, as
// -h shows them.
func (c command) flags() []*flag.Flag {
	fs, _ := c.flagSet(canonicalEnv())
	var out []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { out = append(out, f) })
	return out
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// dashed is how the docs and completion spell a flag: -o, --output. (The
// flag package takes one dash or two for any flag.)
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// shellWord is what a command or flag name may be made of; the scripts
// write names unquoted, so the generator refuses anything else.
var shellWord = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// completionTree is the table as the scripts walk it: the first words
// (commands and groups), each group's subcommands, and each command's
// flags and positional words.
type completionTree struct {
	top    []string            // help order; groups where their first member is
	groups map[string][]string // group → subcommand words
	cmds   []completionCmd
}

type completionCmd struct {
	c      command
	flags  []*flag.Flag
	valued []string            // names of the flags that take a value
	values map[string][]string // flag name → the words of its value
}

// valueChoice is a list of words and the "command flag" pairs whose value
// is one of them.
type valueChoice struct {
	words []string
	pairs []string
}

// valueChoices groups the flags whose values have words by those words,
// in table and flag order, so each script names each list once.
func (t completionTree) valueChoices() []valueChoice {
	var out []valueChoice
	index := map[string]int{}
	for _, cc := range t.cmds {
		for _, f := range cc.flags {
			words, ok := cc.values[f.Name]
			if !ok {
				continue
			}
			key := strings.Join(words, " ")
			i, seen := index[key]
			if !seen {
				i = len(out)
				index[key] = i
				out = append(out, valueChoice{words: words})
			}
			out[i].pairs = append(out[i].pairs, cc.c.name+" "+f.Name)
		}
	}
	return out
}

// valueWord is what a value's word may be made of (EXPONENTIAL_WITH_JITTER).
var valueWord = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func buildTree(cmds []command) (completionTree, error) {
	t := completionTree{groups: map[string][]string{}}
	for _, c := range cmds {
		words := strings.Fields(c.name)
		for _, w := range words {
			if !shellWord.MatchString(w) {
				return t, fmt.Errorf("command name %q is not a plain word", c.name)
			}
		}
		switch len(words) {
		case 1:
			t.top = append(t.top, c.name)
		case 2:
			if _, seen := t.groups[words[0]]; !seen {
				t.top = append(t.top, words[0])
			}
			t.groups[words[0]] = append(t.groups[words[0]], words[1])
		default:
			return t, fmt.Errorf("command name %q has more than two words", c.name)
		}
		cc := completionCmd{c: c, flags: c.flags(), values: map[string][]string{}}
		for name, words := range c.values {
			cc.values[name] = words
		}
		if c.run.remote() {
			cc.values["o"], cc.values["output"] = outputFormats, outputFormats
		}
		takes := map[string]bool{}
		for _, f := range cc.flags {
			if !shellWord.MatchString(f.Name) {
				return t, fmt.Errorf("flag %q of %s is not a plain word", f.Name, c.name)
			}
			if !isBoolFlag(f) {
				cc.valued = append(cc.valued, f.Name)
				takes[f.Name] = true
			}
		}
		for name, words := range cc.values {
			if !takes[name] {
				return t, fmt.Errorf("%s has words for -%s, which is not a flag of it that takes a value", c.name, name)
			}
			for _, w := range words {
				if !valueWord.MatchString(w) {
					return t, fmt.Errorf("-%s of %s: value %q is not a plain word", name, c.name, w)
				}
			}
		}
		for _, a := range c.args {
			if !shellWord.MatchString(a) {
				return t, fmt.Errorf("argument word %q of %s is not a plain word", a, c.name)
			}
		}
		t.cmds = append(t.cmds, cc)
	}
	return t, nil
}

func (cc completionCmd) dashedFlags() string {
	out := make([]string, len(cc.flags))
	for i, f := range cc.flags {
		out[i] = dashed(f.Name)
	}
	return strings.Join(out, " ")
}

func writeBash(w io.Writer, cmds []command) error {
	t, err := buildTree(cmds)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(`# bash completion for schedctl, written by 'schedctl completion bash' from
# schedctl's command table. Load it in this shell with
#   source <(schedctl completion bash)
# or save it as ~/.local/share/bash-completion/completions/schedctl.

_schedctl() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	local cmd=${COMP_WORDS[1]} first=2
	COMPREPLY=()
	if ((COMP_CWORD == 1)); then
`)
	fmt.Fprintf(&b, "\t\tCOMPREPLY=($(compgen -W '%s' -- \"$cur\"))\n\t\treturn\n\tfi\n", strings.Join(append([]string{"help"}, t.top...), " "))
	b.WriteString("\tcase $cmd in\n\thelp)\n\t\tif ((COMP_CWORD == 2)); then\n")
	fmt.Fprintf(&b, "\t\t\tCOMPREPLY=($(compgen -W '%s' -- \"$cur\"))\n", strings.Join(t.top, " "))
	b.WriteString("\t\telif ((COMP_CWORD == 3)); then\n\t\t\tcase ${COMP_WORDS[2]} in\n")
	for _, g := range t.top {
		if subs, ok := t.groups[g]; ok {
			fmt.Fprintf(&b, "\t\t\t%s) COMPREPLY=($(compgen -W '%s' -- \"$cur\")) ;;\n", g, strings.Join(subs, " "))
		}
	}
	b.WriteString("\t\t\tesac\n\t\tfi\n\t\treturn\n\t\t;;\n")
	for _, g := range t.top {
		if subs, ok := t.groups[g]; ok {
			fmt.Fprintf(&b, "\t%s)\n\t\tif ((COMP_CWORD == 2)); then\n", g)
			fmt.Fprintf(&b, "\t\t\tCOMPREPLY=($(compgen -W '%s' -- \"$cur\"))\n\t\t\treturn\n\t\tfi\n", strings.Join(subs, " "))
			b.WriteString("\t\tcmd=\"$cmd ${COMP_WORDS[2]}\" first=3\n\t\t;;\n")
		}
	}
	b.WriteString("\tesac\n\tlocal flags valued args\n\tcase $cmd in\n")
	for _, cc := range t.cmds {
		fmt.Fprintf(&b, "\t'%s')\n\t\tflags='%s'\n\t\tvalued=' %s '\n", cc.c.name, cc.dashedFlags(), strings.Join(cc.valued, " "))
		if len(cc.c.args) > 0 {
			fmt.Fprintf(&b, "\t\targs='%s'\n", strings.Join(cc.c.args, " "))
		}
		b.WriteString("\t\t;;\n")
	}
	b.WriteString(`	*) return ;;
	esac
	# The word after a flag that takes a value is that value: one of its
	# words, or else left to the shell's own completion (file names).
	local name=${prev#-}
	name=${name#-}
	if ((COMP_CWORD > first)) && [[ $prev == -* && -n $name && $valued == *" $name "* ]]; then
		case "$cmd $name" in
`)
	for _, vc := range t.valueChoices() {
		quoted := make([]string, len(vc.pairs))
		for i, p := range vc.pairs {
			quoted[i] = "'" + p + "'"
		}
		fmt.Fprintf(&b, "\t\t%s)\n\t\t\tCOMPREPLY=($(compgen -W '%s' -- \"$cur\"))\n\t\t\t;;\n", strings.Join(quoted, " | "), strings.Join(vc.words, " "))
	}
	b.WriteString(`		*) compopt -o default 2>/dev/null ;;
		esac
		return
	fi
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
	elif [[ -n $args ]]; then
		COMPREPLY=($(compgen -W "$args" -- "$cur"))
	fi
}
complete -F _schedctl schedctl
`)
	_, err = io.WriteString(w, b.String())
	return err
}

// zshQuote quotes s for a single-quoted zsh word.
func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func writeZsh(w io.Writer, cmds []command) error {
	t, err := buildTree(cmds)
	if err != nil {
		return err
	}
	summary := map[string]string{"help": "Show the commands, or one command's usage and flags."}
	for _, cc := range t.cmds {
		summary[cc.c.name] = firstLine(cc.c.summary)
	}
	for g, subs := range t.groups {
		summary[g] = g + " subcommands: " + strings.Join(subs, ", ")
	}
	described := func(indent string, names []string, key func(string) string) string {
		var b strings.Builder
		for _, n := range names {
			fmt.Fprintf(&b, "%s%s\n", indent, zshQuote(n+":"+summary[key(n)]))
		}
		return b.String()
	}
	same := func(n string) string { return n }

	var b strings.Builder
	b.WriteString(`#compdef schedctl
# zsh completion for schedctl, written by 'schedctl completion zsh' from
# schedctl's command table. Load it in this shell (after compinit) with
#   source <(schedctl completion zsh)
# or save it as _schedctl in a directory of $fpath.

_schedctl() {
	local -a top subs flags valued args
	local cmd=${words[2]} first=3
	top=(
`)
	b.WriteString(described("\t\t", t.top, same))
	b.WriteString("\t)\n\tif ((CURRENT == 2)); then\n\t\tsubs=(\n")
	b.WriteString(described("\t\t\t", []string{"help"}, same))
	b.WriteString("\t\t\t\"${top[@]}\"\n\t\t)\n\t\t_describe -t commands 'schedctl command' subs\n\t\treturn\n\tfi\n")
	b.WriteString("\tcase $cmd in\n\t(help)\n\t\tif ((CURRENT == 3)); then\n\t\t\t_describe -t commands 'schedctl command' top\n")
	b.WriteString("\t\telif ((CURRENT == 4)); then\n\t\t\tcase ${words[3]} in\n")
	for _, g := range t.top {
		if subs, ok := t.groups[g]; ok {
			fmt.Fprintf(&b, "\t\t\t(%s)\n\t\t\t\tsubs=(\n%s\t\t\t\t)\n\t\t\t\t_describe -t commands '%s subcommand' subs\n\t\t\t\t;;\n",
				g, described("\t\t\t\t\t", subs, func(s string) string { return g + " " + s }), g)
		}
	}
	b.WriteString("\t\t\tesac\n\t\tfi\n\t\treturn\n\t\t;;\n")
	for _, g := range t.top {
		if subs, ok := t.groups[g]; ok {
			fmt.Fprintf(&b, "\t(%s)\n\t\tif ((CURRENT == 3)); then\n\t\t\tsubs=(\n%s\t\t\t)\n\t\t\t_describe -t commands '%s subcommand' subs\n\t\t\treturn\n\t\tfi\n",
				g, described("\t\t\t\t", subs, func(s string) string { return g + " " + s }), g)
			b.WriteString("\t\tcmd=\"$cmd ${words[3]}\" first=4\n\t\t;;\n")
		}
	}
	b.WriteString("\tesac\n\tcase $cmd in\n")
	for _, cc := range t.cmds {
		fmt.Fprintf(&b, "\t(%s)\n\t\tflags=(\n", zshQuote(cc.c.name))
		for _, f := range cc.flags {
			_, use := flag.UnquoteUsage(f)
			fmt.Fprintf(&b, "\t\t\t%s\n", zshQuote(dashed(f.Name)+":"+firstLine(use)))
		}
		fmt.Fprintf(&b, "\t\t)\n\t\tvalued=(%s)\n", strings.Join(cc.valued, " "))
		if len(cc.c.args) > 0 {
			fmt.Fprintf(&b, "\t\targs=(%s)\n", strings.Join(cc.c.args, " "))
		}
		b.WriteString("\t\t;;\n")
	}
	b.WriteString(`	(*) return 1 ;;
	esac
	# The word after a flag that takes a value is that value: one of its
	# words, or else a file name, as far as completion can tell.
	local prev=${words[CURRENT-1]}
	local name=${${prev#-}#-}
	if ((CURRENT > first)) && [[ $prev == -* ]] && ((${valued[(Ie)$name]})); then
		case "$cmd $name" in
`)
	for _, vc := range t.valueChoices() {
		quoted := make([]string, len(vc.pairs))
		for i, p := range vc.pairs {
			quoted[i] = zshQuote(p)
		}
		fmt.Fprintf(&b, "\t\t(%s)\n\t\t\targs=(%s)\n\t\t\tcompadd -a args\n\t\t\t;;\n", strings.Join(quoted, " | "), strings.Join(vc.words, " "))
	}
	b.WriteString(`		(*) _files ;;
		esac
		return
	fi
	if [[ ${words[CURRENT]} == -* ]]; then
		_describe -t flags 'flag' flags
	elif ((${#args})); then
		compadd -a args
	fi
}

if [[ ${funcstack[1]} == _schedctl ]]; then
	_schedctl "$@"
else
	compdef _schedctl schedctl
fi
`)
	_, err = io.WriteString(w, b.String())
	return err
}
