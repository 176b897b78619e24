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
// Secrets belong to a tenant. A reference is looked up among the secrets of
// the tenant that owns the job, and only there: a job of tenant globex that
// names billing-token gets globex's billing-token or none, never acme's. The
// api refuses a job referencing a secret its tenant does not have (it asks
// Dir.Has, which never reads a value), and the worker scopes every lookup by
// the firing's tenant, so a reference that got past the api anyway resolves
// to nothing.
//
// The reference syntax (and its parser) is pkg/domain/jobspec's, which the api
// validates jobs with: NAME is 1-256 letters, digits, '_', '-' and '.', and
// every "{{" in a header value opens a reference. The source is a directory
// (Dir) with one sub-directory per tenant and one file per secret in it:
//
//	<secrets-dir>/acme/billing-token    acme's billing-token
//	<secrets-dir>/globex/billing-token  globex's, a different secret
//
// the file's content being the value (a trailing newline is dropped) — one
// mounted Kubernetes Secret per tenant. Tenants and names starting with '.'
// are never looked up (no "..", no hidden files, no Kubernetes "..data").
//
// Before secrets were scoped, a file sat directly in the directory and a
// SUNDIAL_SECRET_<NAME> variable also served; both served every tenant.
// Neither is read any more (an environment variable's name cannot say which
// tenant it belongs to without tenants and names colliding once upper-cased):
// Dir.Unscoped and EnvFromEnviron let the worker warn about leftovers.
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
	"syscall"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/process/clock"
)

// EnvPrefix started the environment variables that served secrets to
// every tenant before secrets were scoped; they are no longer read.
const EnvPrefix = "SUNDIAL_SECRET_"

// HasReference reports whether a header value may hold a reference (and so
// must go through Expand).
func HasReference(s string) bool { return strings.Contains(s, "{{") }

// ErrMissing is matched (errors.Is) by every MissingError.
var ErrMissing = errors.New("secrets: secret not found")

// MissingError names a secret the job's tenant does not have.
type MissingError struct{ Tenant, Name string }

func (e *MissingError) Error() string {
	return fmt.Sprintf("secrets: tenant %q has no secret %q (no file %s/%s in --secrets-dir)", e.Tenant, e.Name, e.Tenant, e.Name)
}

// Is makes errors.Is(err, ErrMissing) hold.
func (e *MissingError) Is(target error) bool { return target == ErrMissing }

// Source looks a tenant's secrets up by name.
type Source interface {
	// Lookup returns tenant's value of name and whether the source has
	// it; an error means the source could not tell.
	Lookup(tenant, name string) (string, bool, error)
}

// pathSafe reports whether s may be one component of a path under the
// directory: not empty, no separator, not "." or ".." or hidden.
func pathSafe(s string) bool {
	return s != "" && !strings.HasPrefix(s, ".") && !strings.ContainsAny(s, `/\`+"\x00")
}

// Dir is a directory holding one sub-directory per tenant and one file per
// secret in it.
type Dir string

func (d Dir) path(tenant, name string) (string, bool) {
	if !pathSafe(tenant) || !pathSafe(name) {
		return "", false
	}
	return filepath.Join(string(d), tenant, name), true
}

// Lookup implements Source.
func (d Dir) Lookup(tenant, name string) (string, bool, error) {
	p, ok := d.path(tenant, name)
	if !ok {
		return "", false, nil
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return "", false, nil
	}
	if err != nil {
		// The path names tenant and secret, never the value.
		return "", false, fmt.Errorf("secrets: read %s/%s: %w", tenant, name, err)
	}
	return strings.TrimRight(string(b), "\r\n"), true, nil
}

// Has reports whether tenant has a secret name, without reading its value:
// the api's check of a job's references, which must not hold tenants'
// credentials in its memory.
func (d Dir) Has(tenant, name string) (bool, error) {
	p, ok := d.path(tenant, name)
	if !ok {
		return false, nil
	}
	st, err := os.Stat(p) // follows the symbolic links of a mounted Secret
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("secrets: stat %s/%s: %w", tenant, name, err)
	}
	return st.Mode().IsRegular(), nil
}

// Unscoped lists the regular files directly in the directory: secrets laid
// out before they were scoped by tenant, which no tenant resolves any more.
// The worker warns about them at start (names only).
func (d Dir) Unscoped() ([]string, error) {
	entries, err := os.ReadDir(string(d))
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue
		}
		// A mounted Kubernetes Secret's files are symbolic links into
		// its ..data directory: judge what they point to.
		if st, err := os.Stat(filepath.Join(string(d), e.Name())); err == nil && st.Mode().IsRegular() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Map is secrets held in memory, by tenant and then name: a Source for
// tests and examples.
type Map map[string]map[string]string

// Lookup implements Source.
func (m Map) Lookup(tenant, name string) (string, bool, error) {
	v, ok := m[tenant][name]
	return v, ok, nil
}

// EnvFromEnviron keeps the SUNDIAL_SECRET_* variables of environ (as
// os.Environ returns it), by name. They are no longer a source (they could
// not say which tenant a secret belongs to); the worker warns when it is
// given some, so an upgrade does not fail silently.
func EnvFromEnviron(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, EnvPrefix) {
			out = append(out, k)
		}
	}
	return out
}

// Resolver expands references from its sources, caching values for a TTL.
// It is safe for concurrent use.
type Resolver struct {
	sources []Source
	clk     clock.Clock
	ttl     time.Duration

	mu    sync.Mutex
	cache map[key]cached
}

type key struct{ tenant, name string }

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
	return &Resolver{sources: sources, clk: clk, ttl: ttl, cache: map[key]cached{}}
}

// Lookup returns tenant's value of name, or a *MissingError. Nothing of
// another tenant is ever consulted: an empty tenant has no secrets.
func (r *Resolver) Lookup(tenant, name string) (string, error) {
	if tenant == "" {
		return "", &MissingError{Tenant: tenant, Name: name}
	}
	k := key{tenant, name}
	now := r.clk.Now()
	if r.ttl > 0 {
		r.mu.Lock()
		c, ok := r.cache[k]
		r.mu.Unlock()
		if ok && now.Sub(c.at) < r.ttl {
			if !c.found {
				return "", &MissingError{Tenant: tenant, Name: name}
			}
			return c.value, nil
		}
	}
	var (
		value string
		found bool
	)
	for _, s := range r.sources {
		v, ok, err := s.Lookup(tenant, name)
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
		r.cache[k] = cached{value: value, found: found, at: now}
		r.mu.Unlock()
	}
	if !found {
		return "", &MissingError{Tenant: tenant, Name: name}
	}
	return value, nil
}

// Expand replaces every reference in s by the value of tenant's secret of
// that name. It returns the values it used (so the caller can redact them
// from anything it logs or stores) and the first lookup error (a
// *MissingError when the tenant has no such secret), or an error wrapping
// jobspec.ErrMalformedSecretRef. A string without references is returned
// as it is.
func (r *Resolver) Expand(tenant, s string) (string, []string, error) {
	if !HasReference(s) {
		return s, nil, nil
	}
	var (
		used    []string
		lookErr error
	)
	out, err := jobspec.ExpandSecrets(s, func(name string) (string, bool) {
		v, err := r.Lookup(tenant, name)
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
