package tokens

// The bootstrap tokens of --tokens-file: the tokens an
// operator writes by hand before any api-made token exists, kept in the
// file as argon2id hashes (auth.HashToken, `schedctl token hash`) and
// read again whenever the file changes.
//
// A presented token has no id to find its hash by, so a token not seen
// before is checked against every entry (about 5 ms each with
// auth.BootstrapHashParams, at most maxChecks at once); the answer is then
// remembered by the token's SHA-256 until the file changes (a match) or
// for negativeTTL (no match). Tokens shaped like the api's own ("sdl_")
// are left to the Verifier and never hashed here.
//
// The file is polled, not signalled: every PollInterval its content's
// SHA-256 is compared with the loaded one. Kubernetes updates a mounted
// Secret by swapping a symlink, with no signal to the process, and a
// poll on the injected clock is one mechanism for Kubernetes, `make run`
// and the tests alike. A changed file that parses replaces the whole set
// at once and forgets every cached answer, so a removed token is refused
// within RevocationBound; one that does not parse is refused with an
// error naming the line, and the old set stays.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// maxBootstrapCache bounds the remembered answers of each kind; past it
// they are forgotten at once (a flood of distinct tokens costs checks,
// not memory).
const maxBootstrapCache = 10000

// BootstrapSet is a parsed tokens file.
type BootstrapSet struct {
	path    string
	digest  [sha256.Size]byte
	entries []bootstrapEntry
}

type bootstrapEntry struct {
	hash auth.Hash
	// p's Actor is "" for an unnamed entry: it carries the token's
	// fingerprint, known only once a token matches.
	p    auth.Principal
	line int
}

// Len is the number of tokens in the set.
func (s *BootstrapSet) Len() int { return len(s.entries) }

// Tenants lists the set's distinct tenants, sorted.
func (s *BootstrapSet) Tenants() []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range s.entries {
		if !seen[e.p.Tenant] {
			seen[e.p.Tenant] = true
			out = append(out, e.p.Tenant)
		}
	}
	sort.Strings(out)
	return out
}

// LoadBootstrap reads and parses the tokens file at path.
func LoadBootstrap(path string) (*BootstrapSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	return ParseBootstrap(path, b)
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// ParseBootstrap parses a tokens file's content: a YAML (or JSON) map of
// argon2id hash to principal, the principal written "tenant",
// "tenant:name", "tenant:name:role", "tenant::role" or as a mapping
// {tenant, name, role}. Each error names path and the line; none quotes
// the file, which may hold a plain token.
func ParseBootstrap(path string, b []byte) (*BootstrapSet, error) {
	set := &BootstrapSet{path: path, digest: sha256.Sum256(b)}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		// Not the decoder's message, which can quote the file; its line
		// only.
		where := ""
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			where = " line " + m[1]
		}
		return nil, fmt.Errorf("tokens file %s%s: not YAML or JSON: write one `<argon2id hash>: <tenant[:name[:role]]>` line per token", path, where)
	}
	if len(doc.Content) == 0 {
		return set, nil // an empty file: no bootstrap tokens
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("tokens file %s line %d: must be a map of argon2id hash to tenant, tenant:name, tenant:name:role or {tenant, name, role}", path, root.Line)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("tokens file %s line %d: each key must be an argon2id hash", path, k.Line)
		}
		key := strings.TrimSpace(k.Value)
		h, err := auth.ParseHash(key)
		switch {
		case errors.Is(err, auth.ErrNotHash) && !strings.HasPrefix(key, "$"):
			return nil, fmt.Errorf("tokens file %s line %d: the key is a plain token, not an argon2id hash; plain tokens are refused "+
				"(anyone who reads the file could use them): replace it with the line `printf %%s TOKEN | schedctl token hash --principal PRINCIPAL` prints, "+
				"or make a new token with `schedctl token hash --principal PRINCIPAL`", path, k.Line)
		case err != nil:
			return nil, fmt.Errorf("tokens file %s line %d: %v", path, k.Line, err)
		}
		if prev, ok := seen[key]; ok {
			return nil, fmt.Errorf("tokens file %s line %d: the same hash as line %d", path, k.Line, prev)
		}
		seen[key] = k.Line
		spec, err := principalSpec(v)
		if err != nil {
			return nil, fmt.Errorf("tokens file %s line %d: %v", path, v.Line, err)
		}
		p, err := auth.ParsePrincipal(spec)
		if err != nil {
			return nil, fmt.Errorf("tokens file %s line %d: %v", path, v.Line, err)
		}
		set.entries = append(set.entries, bootstrapEntry{hash: h, p: p, line: k.Line})
	}
	return set, nil
}

// principalSpec is the colon form of a principal written as a scalar or
// a {tenant, name, role} mapping.
func principalSpec(n *yaml.Node) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Value, nil
	case yaml.MappingNode:
		var p struct {
			Tenant string `yaml:"tenant"`
			Name   string `yaml:"name"`
			Role   string `yaml:"role"`
		}
		if err := n.Decode(&p); err != nil || p.Tenant == "" || strings.Contains(p.Tenant+p.Name+p.Role, ":") {
			return "", errors.New("a principal mapping needs tenant, and may have name and role (no ':' in them)")
		}
		switch {
		case p.Role != "":
			return p.Tenant + ":" + p.Name + ":" + p.Role, nil
		case p.Name != "":
			return p.Tenant + ":" + p.Name, nil
		}
		return p.Tenant, nil
	}
	return "", errors.New("the principal must be tenant, tenant:name, tenant:name:role or {tenant, name, role}")
}

// BootstrapConfig configures a Bootstrap.
type BootstrapConfig struct {
	// Initial is the set loaded at start (LoadBootstrap); its path is
	// the file watched.
	Initial *BootstrapSet
	Clock   clock.Clock
	Logger  *slog.Logger
	// PollInterval is how often the file is read for changes;
	// DefaultPollInterval by default, which makes RevocationBound hold
	// for a removed token too.
	PollInterval time.Duration
}

// Bootstrap checks bootstrap tokens for pkg/domain/auth (auth.Verifier), and is
// a lifecycle.Service whose loop reloads the tokens file when it changes.
type Bootstrap struct {
	cfg    BootstrapConfig
	checks chan struct{}
	runner lifecycle.Runner

	mu  sync.Mutex
	set *BootstrapSet
	// gen counts replacements of set: a check that began before one is
	// not cached after it.
	gen uint64
	// badDigest is the content last refused, so it is logged once.
	badDigest [sha256.Size]byte
	good      map[[sha256.Size]byte]auth.Principal
	bad       map[[sha256.Size]byte]time.Time
}

// NewBootstrap returns a Bootstrap over cfg.Initial.
func NewBootstrap(cfg BootstrapConfig) (*Bootstrap, error) {
	if cfg.Initial == nil {
		return nil, errors.New("tokens: BootstrapConfig.Initial is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	return &Bootstrap{cfg: cfg, checks: make(chan struct{}, maxChecks), set: cfg.Initial,
		good: map[[sha256.Size]byte]auth.Principal{}, bad: map[[sha256.Size]byte]time.Time{}}, nil
}

// Set is the set in force.
func (b *Bootstrap) Set() *BootstrapSet {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.set
}

// Verify implements auth.Verifier.
func (b *Bootstrap) Verify(ctx context.Context, token string) (auth.Principal, bool, error) {
	if token == "" || strings.HasPrefix(token, Prefix) {
		return auth.Principal{}, false, nil
	}
	key := sha256.Sum256([]byte(token))
	now := b.cfg.Clock.Now()
	b.mu.Lock()
	if p, ok := b.good[key]; ok {
		b.mu.Unlock()
		return p, true, nil
	}
	if until, ok := b.bad[key]; ok && now.Before(until) {
		b.mu.Unlock()
		return auth.Principal{}, false, nil
	}
	set, gen := b.set, b.gen
	b.mu.Unlock()
	if len(set.entries) == 0 {
		return auth.Principal{}, false, nil
	}

	select {
	case b.checks <- struct{}{}:
	case <-ctx.Done():
		return auth.Principal{}, false, ctx.Err()
	}
	var p auth.Principal
	found := false
	for _, e := range set.entries {
		if e.hash.Matches(token) {
			p, found = e.p, true
			break
		}
	}
	<-b.checks
	if found && p.Actor == "" {
		p.Actor = auth.UnnamedActor(p.Tenant, token)
	}

	b.mu.Lock()
	if b.gen != gen {
		// The file changed while we checked: answer from the new set.
		b.mu.Unlock()
		return b.Verify(ctx, token)
	}
	defer b.mu.Unlock()
	if found {
		if len(b.good) >= maxBootstrapCache {
			clear(b.good)
		}
		b.good[key] = p
		return p, true, nil
	}
	if len(b.bad) >= maxBootstrapCache {
		clear(b.bad)
	}
	b.bad[key] = now.Add(negativeTTL)
	return auth.Principal{}, false, nil
}

// Reload reads the file once and, when its content changed and parses,
// puts the new set in force. changed is false when the content is the
// one in force (or the one last refused).
func (b *Bootstrap) Reload(ctx context.Context) (changed bool, err error) {
	b.mu.Lock()
	path, cur, badDigest := b.set.path, b.set.digest, b.badDigest
	b.mu.Unlock()
	content, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("tokens file %s: %w", path, err)
	}
	d := sha256.Sum256(content)
	if d == cur || d == badDigest {
		return false, nil
	}
	set, err := ParseBootstrap(path, content)
	if err != nil {
		b.mu.Lock()
		b.badDigest = d
		b.mu.Unlock()
		b.cfg.Logger.ErrorContext(ctx, "tokens file changed but is refused; the tokens loaded before stay in force", "err", err)
		return true, err
	}
	b.mu.Lock()
	b.set, b.badDigest = set, [sha256.Size]byte{}
	b.gen++
	clear(b.good)
	clear(b.bad)
	b.mu.Unlock()
	b.cfg.Logger.InfoContext(ctx, "tokens file reloaded", "path", path, "tokens", set.Len(), "tenants", set.Tenants())
	return true, nil
}

// Start reads the file every PollInterval until Stop.
func (b *Bootstrap) Start(context.Context) error {
	return b.runner.Run(func(ctx context.Context) error {
		t := b.cfg.Clock.NewTimer(b.cfg.PollInterval)
		defer t.Stop()
		unreadable := false
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C():
			}
			_, err := b.Reload(ctx)
			var pathErr *os.PathError
			switch {
			case errors.As(err, &pathErr) && !unreadable:
				// A Secret's symlink swap can hide the file for an
				// instant; say so once, not every poll.
				b.cfg.Logger.Warn("tokens file not read; the tokens loaded before stay in force", "err", err)
				unreadable = true
			case err == nil && unreadable:
				b.cfg.Logger.Info("tokens file read again")
				unreadable = false
			}
			t.Reset(b.cfg.PollInterval)
		}
	})
}

// Stop ends the poll.
func (b *Bootstrap) Stop() { b.runner.Stop() }

var _ auth.Verifier = (*Bootstrap)(nil)
