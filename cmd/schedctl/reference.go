package main

// docs/cli.md, written from the command table and a template of prose
// (cli.md.tmpl, beside this file). The template is Markdown with three
// directives, each alone on a line, replaced by reference text:
//
//	<!-- schedctl:commands -->           a table of every command, linked to its section
//	<!-- schedctl:connection-flags -->   the flags every gRPC command takes
//	<!-- schedctl:command NAME -->       NAME's synopsis, summary and flags
//
// Every command must have exactly one section, so a new row cannot go
// undocumented. TestCLIReference fails while docs/cli.md differs from what
// this writes; `go generate` (or `make cli-doc`) rewrites it.

import (
	"flag"
	"fmt"
	"regexp"
	"strings"
)

const (
	directiveCommands  = "<!-- schedctl:commands -->"
	directiveConnFlags = "<!-- schedctl:connection-flags -->"
	directiveCommand   = "<!-- schedctl:command "
)

// referenceHeader opens the generated page, for a reader about to edit it.
const referenceHeader = "<!-- Code generated from cmd/schedctl/cli.md.tmpl and schedctl's command table by `make cli-doc`; DO NOT EDIT. -->\n\n"

// renderReference returns docs/cli.md: tmpl with its directives replaced.
func renderReference(tmpl string, cmds []command) (string, error) {
	byName := map[string]command{}
	for _, c := range cmds {
		byName[c.name] = c
	}
	// First pass: the section (the heading above it) each command's
	// directive is in, for the links of the commands table.
	lines := strings.Split(tmpl, "\n")
	section := map[string]string{}
	connSection, heading := "", ""
	for i, line := range lines {
		switch {
		case strings.HasPrefix(line, "#"):
			heading = strings.TrimLeft(line, "# ")
		case line == directiveCommands:
		case line == directiveConnFlags:
			connSection = heading
		case strings.HasPrefix(line, directiveCommand):
			name, ok := strings.CutSuffix(strings.TrimPrefix(line, directiveCommand), " -->")
			if _, known := byName[name]; !ok || !known {
				return "", fmt.Errorf("cli.md.tmpl:%d: no command %q in the table", i+1, name)
			}
			if _, dup := section[name]; dup {
				return "", fmt.Errorf("cli.md.tmpl:%d: %s is documented twice", i+1, name)
			}
			section[name] = heading
		case strings.HasPrefix(line, "<!-- schedctl:"):
			return "", fmt.Errorf("cli.md.tmpl:%d: unknown directive %q", i+1, line)
		}
	}
	for _, c := range cmds {
		if _, ok := section[c.name]; !ok {
			return "", fmt.Errorf("cli.md.tmpl has no section for %s: add a line %s%s -->", c.name, directiveCommand, c.name)
		}
	}
	if connSection == "" {
		return "", fmt.Errorf("cli.md.tmpl has no %s", directiveConnFlags)
	}

	conn := connFlagNames()
	var b strings.Builder
	b.WriteString(referenceHeader)
	for i, line := range lines {
		switch {
		case line == directiveCommands:
			b.WriteString("| Command | What it does |\n|---|---|\n")
			for _, c := range cmds {
				fmt.Fprintf(&b, "| [`%s`](#%s) | %s |\n", c.name, anchor(section[c.name]), cell(firstLine(c.summary)))
			}
		case line == directiveConnFlags:
			var flags []*flag.Flag
			fs := flag.NewFlagSet("", flag.ContinueOnError)
			(&connFlags{}).register(fs, canonicalEnv().io)
			fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
			writeFlagTable(&b, flags)
		case strings.HasPrefix(line, directiveCommand):
			name := strings.TrimSuffix(strings.TrimPrefix(line, directiveCommand), " -->")
			c := byName[name]
			fmt.Fprintf(&b, "```\nschedctl %s %s\n```\n\n%s\n", c.name, c.usage, c.summary)
			var own []*flag.Flag
			for _, f := range c.flags() {
				if !c.run.remote() || !conn[f.Name] {
					own = append(own, f)
				}
			}
			if len(own) > 0 {
				b.WriteString("\n")
				writeFlagTable(&b, own)
			}
			if c.run.remote() {
				fmt.Fprintf(&b, "\nIt also takes the [connection flags](#%s).\n", anchor(connSection))
			}
		default:
			b.WriteString(line)
			if i < len(lines)-1 {
				b.WriteString("\n")
			}
		}
	}
	return b.String(), nil
}

// writeFlagTable writes flags as -h shows them, one row each: the flag and
// the kind of value it takes, its default, and what it does.
func writeFlagTable(b *strings.Builder, flags []*flag.Flag) {
	b.WriteString("| Flag | Default | What it does |\n|---|---|---|\n")
	for _, f := range flags {
		kind, use := flag.UnquoteUsage(f)
		spelled := dashed(f.Name)
		if kind != "" {
			spelled += " " + kind
		}
		def := ""
		switch f.DefValue {
		case "", "0", "0s", "false":
		default:
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", spelled, cell(def), cell(use))
	}
}

// cell escapes what would end a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

var notInAnchor = regexp.MustCompile(`[^a-z0-9 _-]`)

// anchor is the fragment GitHub gives a heading: lower case, punctuation
// dropped, spaces as hyphens.
func anchor(heading string) string {
	return strings.ReplaceAll(notInAnchor.ReplaceAllString(strings.ToLower(heading), ""), " ", "-")
}

// connFlagNames are the flags every remote command takes.
func connFlagNames() map[string]bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	(&connFlags{}).register(fs, canonicalEnv().io)
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}
