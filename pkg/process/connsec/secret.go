package connsec

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/sundialhq/sundial/pkg/process/config"
)

// redacted is what a Secret prints as.
const redacted = "[redacted]"

// Secret is a credential. Every way of printing it (fmt's verbs, slog, the
// flag package's usage output) shows [redacted]; only Reveal returns it.
type Secret struct{ v string }

// NewSecret wraps a credential.
func NewSecret(v string) Secret { return Secret{v: v} }

// Reveal returns the credential, for the one call that sends it.
func (s Secret) Reveal() string { return s.v }

// IsZero reports whether no credential was given.
func (s Secret) IsZero() bool { return s.v == "" }

// String implements fmt.Stringer and flag.Value. It is empty for the empty
// secret, so a flag's usage line shows no default.
func (s Secret) String() string {
	if s.v == "" {
		return ""
	}
	return redacted
}

// GoString keeps %#v from printing the field.
func (s Secret) GoString() string { return "connsec.Secret(" + s.String() + ")" }

// Format covers every verb, %x and %q included.
func (s Secret) Format(f fmt.State, verb rune) { _, _ = f.Write([]byte(s.String())) }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText keeps encoding/json and friends from writing the value.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Set implements flag.Value.
func (s *Secret) Set(v string) error { s.v = v; return nil }

// Password is a password given as a value (flag or environment variable) or
// as a file holding it.
type Password struct {
	Value Secret
	// File holds the password; a trailing newline is dropped. It is read
	// when the password is needed, not only at start.
	File string
}

// IsZero reports whether neither a value nor a file was given.
func (p Password) IsZero() bool { return p.Value.IsZero() && p.File == "" }

// Register adds --<name> and --<name>-file to fs; what names the password
// in their help.
func (p *Password) Register(fs *flag.FlagSet, name, what string) {
	fs.Var(&p.Value, name, what+"; prefer "+config.EnvName(name)+" or --"+name+"-file, a command-line value shows in ps")
	fs.StringVar(&p.File, name+"-file", p.File, "file holding the "+what+" (a mounted Secret), read again for each new connection")
}

// Validate records a password given both ways, or a file that cannot be
// read or is empty, naming --<name> or --<name>-file.
func (p Password) Validate(pr *config.Problems, name string) {
	if !p.Value.IsZero() && p.File != "" {
		pr.Addf(name, "give --%s or --%s-file, not both", name, name)
		return
	}
	if p.File != "" {
		if _, err := p.Read(); err != nil {
			pr.Addf(name+"-file", "%v", err)
		}
	}
}

// ValidateUser records a username given without a password and, unless
// the component accepts a password alone, a password without a username;
// prefix starts both flags' names (--<prefix>-username, --<prefix>-password)
// and what names the component in the message.
func ValidateUser(p *config.Problems, prefix, what, username string, pw Password, passwordAlone bool) {
	switch {
	case username != "" && pw.IsZero():
		p.Addf(prefix+"-password", "required with --%s-username (or --%s-password-file)", prefix, prefix)
	case username == "" && !pw.IsZero() && !passwordAlone:
		p.Addf(prefix+"-username", "required with a %s password", what)
	}
}

// errEmptyPassword is returned for a password file that holds nothing.
var errEmptyPassword = errors.New("is empty")

// Read returns the password: the value, or the file's content without its
// trailing newline. The error names the file but never holds its content.
func (p Password) Read() (string, error) {
	if p.File == "" {
		return p.Value.Reveal(), nil
	}
	b, err := os.ReadFile(p.File)
	if err != nil {
		// *PathError says which file and why, nothing of what is in it.
		return "", err
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s %w", p.File, errEmptyPassword)
	}
	return s, nil
}
