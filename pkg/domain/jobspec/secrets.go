package jobspec

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Secret references. An HTTP target's header value may name a secret instead
// of carrying it:
//
//	Authorization: Bearer {{secret:billing_api_token}}
//
// The api stores the reference as written (never a value), and the worker
// replaces each reference with the secret from its own secret source just
// before the request, so the value is never in Postgres, Kafka, the ledger,
// logs or an API response. NAME is 1-256 of [A-Za-z0-9_.-]. There is no
// escape: every "{{" in a header value must open a well-formed reference.
//
// A header value written in plain text is stored and returned as given; that
// is the user's choice, and references are the supported way to pass
// secrets.
const (
	secretOpen     = "{{"
	secretPrefix   = "{{secret:"
	secretClose    = "}}"
	MaxSecretName  = 256
	secretNameHint = "want {{secret:NAME}} with NAME 1-256 letters, digits and . _ -"
)

// ErrMalformedSecretRef is wrapped by the errors SecretReferences and
// ExpandSecrets return for a value with a malformed reference.
var ErrMalformedSecretRef = errors.New("malformed secret reference")

// ErrUnknownSecret is wrapped by ExpandSecrets' error when lookup does not
// know a referenced secret.
var ErrUnknownSecret = errors.New("unknown secret")

// refSpan is one reference in a value: value[start:end] is the whole
// "{{secret:NAME}}".
type refSpan struct {
	start, end int
	name       string
}

// scanSecretRefs finds every reference in v. Its error says where the first
// malformed one starts (a byte offset), never what the value holds: header
// values are sensitive.
func scanSecretRefs(v string) ([]refSpan, error) {
	var out []refSpan
	for off := 0; ; {
		i := strings.Index(v[off:], secretOpen)
		if i < 0 {
			return out, nil
		}
		start := off + i
		rest := v[start:]
		if !strings.HasPrefix(rest, secretPrefix) {
			return nil, fmt.Errorf("%w at byte %d: %s", ErrMalformedSecretRef, start, secretNameHint)
		}
		nameAndTail := rest[len(secretPrefix):]
		j := strings.Index(nameAndTail, secretClose)
		if j < 0 {
			return nil, fmt.Errorf("%w at byte %d: no closing }}: %s", ErrMalformedSecretRef, start, secretNameHint)
		}
		name := nameAndTail[:j]
		if !validSecretName(name) {
			return nil, fmt.Errorf("%w at byte %d: %s", ErrMalformedSecretRef, start, secretNameHint)
		}
		end := start + len(secretPrefix) + j + len(secretClose)
		out = append(out, refSpan{start: start, end: end, name: name})
		off = end
	}
}

func validSecretName(name string) bool {
	if name == "" || len(name) > MaxSecretName {
		return false
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '.' || b == '-') {
			return false
		}
	}
	return true
}

// SecretReferences returns the secret names value references, in order of
// appearance (repeats included), or an error wrapping ErrMalformedSecretRef.
func SecretReferences(value string) ([]string, error) {
	spans, err := scanSecretRefs(value)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.name
	}
	return names, nil
}

// ExpandSecrets returns value with every {{secret:NAME}} replaced by
// lookup(NAME). A value without references is returned unchanged. The error
// (wrapping ErrMalformedSecretRef or ErrUnknownSecret) names the secret,
// never a value.
func ExpandSecrets(value string, lookup func(name string) (string, bool)) (string, error) {
	spans, err := scanSecretRefs(value)
	if err != nil || len(spans) == 0 {
		return value, err
	}
	var b strings.Builder
	prev := 0
	for _, s := range spans {
		secret, ok := lookup(s.name)
		if !ok {
			return "", fmt.Errorf("%w %q", ErrUnknownSecret, s.name)
		}
		b.WriteString(value[prev:s.start])
		b.WriteString(secret)
		prev = s.end
	}
	b.WriteString(value[prev:])
	return b.String(), nil
}

// SecretNames lists the distinct secrets a job's target headers reference,
// sorted; malformed references (which Validate refuses) are ignored.
func SecretNames(job *sundialv1.Job) []string {
	seen := map[string]bool{}
	for _, v := range job.GetTarget().GetHttp().GetHeaders() {
		names, _ := SecretReferences(v)
		for _, n := range names {
			seen[n] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}
