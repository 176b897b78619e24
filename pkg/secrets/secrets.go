// Package secrets resolves secret references in job definitions.
//
// A job's target headers may say `{{secret:NAME}}` instead of a credential:
//
//	Authorization: Bearer {{secret:billing-token}}
//
// Postgres, the outbox, Kafka and the dead-letter queue only ever carry the
// reference; the worker replaces it with the value from its own secret
// sources just before the request is sent, and never logs it. A missing
// secret fails the attempt permanently (retrying cannot make it appear).
//
// The reference syntax (and its parser) is pkg/jobspec's, which the api
// validates jobs with: NAME is 1-256 letters, digits, '_', '-' and '.', and
// every "{{" in a header value opens a reference. Sources, searched in
// order:
//
//   - Dir: one file per secret in a directory, the file name being the
//     secret's name and its content the value (a trailing newline is
//     dropped) — the layout of a mounted Kubernetes Secret; names starting
//     with '.' are never looked up there (no "..", no hidden files);
//   - Env: environment variables SUNDIAL_SECRET_<NAME>, NAME upper-cased
//     with '-' and '.' turned into '_'.
//
// Values are cached for a short while (Resolver's TTL), so a rotated file
// takes effect within it and the firing path does not read a file per
// request.
package secrets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/jobspec"
)

// EnvPrefix starts every environment variable the Env source reads.
const EnvPrefix = "SUNDIAL_SECRET_"

// HasReference reports whether a header value may hold a reference (and so
// must go through Expand).
func HasReference(s string) bool { return strings.Contains(s, "{{") }

// ErrMissing is matched (errors.Is) by every MissingError.
var ErrMissing = errors.New("secrets: secret not found")

// MissingError names a secret no source has.
type MissingError struct{ Name string }

func (e *MissingError) Error() string {
	return fmt.Sprintf("secrets: secret %q not found (no file in --secrets-dir, no %s%s)", e.Name, EnvPrefix, EnvName(e.Name))
}

// Is makes errors.Is(err, ErrMissing) hold.
func (e *MissingError) Is(target error) bool { return target == ErrMissing }

// Source looks secrets up by name.
type Source interface {
	// Lookup returns the value and whether the source has it; an error
	// means the source could not tell.
	Lookup(name string) (string, bool, error)
}

// Dir is a directory holding one file per secret.
type Dir string

// Lookup implements Source.
func (d Dir) Lookup(name string) (string, bool, error) {
	if name == "" || strings.HasPrefix(name, ".") || strings.ContainsAny(name, `/\`) {
		return "", false, nil
	}
	b, err := os.ReadFile(filepath.Join(string(d), name))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("secrets: read %s: %w", name, err)
	}
	return strings.TrimRight(string(b), "\r\n"), true, nil
}

// Env is the secrets found in an environment, by variable name.
type Env map[string]string

// EnvFromEnviron keeps the SUNDIAL_SECRET_* variables of environ (as
// os.Environ returns it); main passes it in, so nothing deep in the code
// reads the environment.
func EnvFromEnviron(environ []string) Env {
	e := Env{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, EnvPrefix) {
			e[k] = v
		}
	}
	return e
}

// EnvName is the part after SUNDIAL_SECRET_ of name's variable.
func EnvName(name string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '-', '.':
			return '_'
		}
		return r
	}, strings.ToUpper(name))
}

// Lookup implements Source.
func (e Env) Lookup(name string) (string, bool, error) {
	v, ok := e[EnvPrefix+EnvName(name)]
	return v, ok, nil
}

// Resolver expands references from its sources, caching values for a TTL.
// It is safe for concurrent use.
type Resolver struct {
	sources []Source
	clk     clock.Clock
	ttl     time.Duration

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	value string
	found bool
	at    time.Time
}

// DefaultTTL is how long a looked-up value (or its absence) is reused.
const DefaultTTL = 10 * time.Second

// NewResolver searches sources in order. clk nil means the wall clock; ttl
// 0 means DefaultTTL, negative disables the cache.
func NewResolver(clk clock.Clock, ttl time.Duration, sources ...Source) *Resolver {
	if clk == nil {
		clk = clock.Real{}
	}
	if ttl == 0 {
		ttl = DefaultTTL
	}
	return &Resolver{sources: sources, clk: clk, ttl: ttl, cache: map[string]cached{}}
}

// Lookup returns the value of name, or a *MissingError.
func (r *Resolver) Lookup(name string) (string, error) {
	now := r.clk.Now()
	if r.ttl > 0 {
		r.mu.Lock()
		c, ok := r.cache[name]
		r.mu.Unlock()
		if ok && now.Sub(c.at) < r.ttl {
			if !c.found {
				return "", &MissingError{Name: name}
			}
			return c.value, nil
		}
	}
	var (
		value string
		found bool
	)
	for _, s := range r.sources {
		v, ok, err := s.Lookup(name)
		if err != nil {
			return "", err // not cached: the next call asks again
		}
		if ok {
			value, found = v, true
			break
		}
	}
	if r.ttl > 0 {
		r.mu.Lock()
		r.cache[name] = cached{value: value, found: found, at: now}
		r.mu.Unlock()
	}
	if !found {
		return "", &MissingError{Name: name}
	}
	return value, nil
}

// Expand replaces every reference in s by its secret's value. It returns
// the values it used (so the caller can redact them from anything it logs
// or stores) and the first lookup error (a *MissingError when no source has
// a secret), or an error wrapping jobspec.ErrMalformedSecretRef. A string
// without references is returned as it is.
func (r *Resolver) Expand(s string) (string, []string, error) {
	if !HasReference(s) {
		return s, nil, nil
	}
	var (
		used    []string
		lookErr error
	)
	out, err := jobspec.ExpandSecrets(s, func(name string) (string, bool) {
		v, err := r.Lookup(name)
		if err != nil {
			lookErr = err
			return "", false
		}
		used = append(used, v)
		return v, true
	})
	if lookErr != nil {
		return "", nil, lookErr
	}
	if err != nil {
		return "", nil, fmt.Errorf("secrets: %w", err)
	}
	return out, used, nil
}

// Redacted replaces each secret value.
const Redacted = "[REDACTED]"

// Redact replaces every occurrence of each value in s by Redacted. Values
// shorter than 4 bytes are left alone: replacing "1" everywhere would make
// any text unreadable while protecting nothing.
func Redact(s string, values []string) string {
	for _, v := range values {
		if len(v) >= 4 && strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, Redacted)
		}
	}
	return s
}
