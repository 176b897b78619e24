// Package quotas is every per-tenant limit, in one view: the quotas file
// operators write (defaults and per-tenant overrides), a tenant's Limits
// resolved from it over the flag defaults (Resolve, Tenants.For), and the
// checks against them. The api enforces the job limits (how many jobs, how
// close their slots, how fast they are created: CheckCreate,
// CheckInterval); the worker enforces the firing rate (Limits.Firing, in
// services/worker/internal/limits).
//
// One file, one format, one resolution, so an operator configures a
// tenant in one place and both readers see the same Limits; neither
// accepts a key it does not know, nor a negative limit, whichever of the
// two enforces it.
package quotas

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"gopkg.in/yaml.v3"
)

// Overrides is a partial set of limits, as written in the quotas file:
// unset fields keep the value beneath (the flag defaults, then the file's
// defaults).
type Overrides struct {
	// The api's (CheckCreate, CheckInterval).
	MaxJobs          *int           `yaml:"max_jobs"`
	MinInterval      *time.Duration `yaml:"min_interval"`
	CreatesPerMinute *int           `yaml:"create_rate_per_minute"`
	// The worker's: firings a second the tenant's firings may go out at,
	// across the cluster, and how many may go out at once above it; 0
	// rate: no limit.
	FiringRate  *float64 `yaml:"firing_rate_per_second"`
	FiringBurst *int     `yaml:"firing_burst"`
	// The ledger's: how long the tenant's execution history is kept (1h
	// to 2160h; unset: 2160h, 90 days). The api copies it to Postgres for
	// the ledger's writers (services/api/internal/app, ledgerttl.go).
	LedgerTTL *time.Duration `yaml:"ledger_ttl"`
}

// IsZero reports whether o overrides nothing.
func (o Overrides) IsZero() bool {
	return o.MaxJobs == nil && o.MinInterval == nil && o.CreatesPerMinute == nil && o.FiringRate == nil && o.FiringBurst == nil && o.LedgerTTL == nil
}

// File is the quotas file:
//
//	defaults:                    # optional; replaces the flag defaults
//	  max_jobs: 100000
//	  min_interval: 1s
//	  create_rate_per_minute: 6000
//	  firing_rate_per_second: 0  # 0: no limit (the worker's)
//	tenants:
//	  acme:                      # only the fields given change
//	    max_jobs: 500
//	    min_interval: 1m
//	    firing_rate_per_second: 50
//	    firing_burst: 100
//	  loadtest:
//	    max_jobs: 0              # 0: no limit
type File struct {
	Defaults Overrides            `yaml:"defaults"`
	Tenants  map[string]Overrides `yaml:"tenants"`
}

// ParseFile reads a quotas file; unknown keys are errors, so a misspelt
// quota does not silently fall back to its default.
func ParseFile(b []byte) (File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return f, fmt.Errorf("quotas file: %w", err)
	}
	return f, nil
}

// LoadFile reads and parses the quotas file at path.
func LoadFile(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("quotas file: %w", err)
	}
	f, err := ParseFile(b)
	if err != nil {
		return f, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Defaults when nothing is configured: the job limits' (the api's flags
// start from these); no firing-rate quota.
const (
	DefaultMaxJobs          = 100_000
	DefaultMinInterval      = time.Second
	DefaultCreatesPerMinute = 6_000 // 100 per second on average
)

// Limits are one tenant's quotas, every one of them. A zero field means no
// limit.
type Limits struct {
	// MaxJobs bounds the tenant's jobs that are not deleted (active,
	// paused and completed ones count until purged).
	MaxJobs int
	// MinInterval is the smallest gap allowed between two consecutive
	// slots of one job's schedule.
	MinInterval time.Duration
	// CreatesPerMinute bounds job creations in any sliding minute.
	CreatesPerMinute int
	// Firing is the rate the tenant's firings may go out at, across the
	// cluster (the worker's).
	Firing FiringRate
}

// FiringRate is a tenant's firing-rate quota: Rate firings a second on
// average, Burst at once above it. A zero Rate limits nothing.
type FiringRate struct {
	Rate  float64
	Burst int
}

// DefaultLimits are the built-in defaults.
func DefaultLimits() Limits {
	return Limits{MaxJobs: DefaultMaxJobs, MinInterval: DefaultMinInterval, CreatesPerMinute: DefaultCreatesPerMinute}
}

// Validate names the first negative limit by its key in the quotas file.
func (l Limits) Validate() error {
	switch {
	case l.MaxJobs < 0:
		return fmt.Errorf("%s must not be negative, got %d", MaxJobs, l.MaxJobs)
	case l.MinInterval < 0:
		return fmt.Errorf("%s must not be negative, got %s", MinInterval, l.MinInterval)
	case l.CreatesPerMinute < 0:
		return fmt.Errorf("create_rate_per_minute must not be negative, got %d", l.CreatesPerMinute)
	case l.Firing.Rate < 0:
		return fmt.Errorf("firing_rate_per_second must not be negative, got %g", l.Firing.Rate)
	case l.Firing.Burst < 0:
		return fmt.Errorf("firing_burst must not be negative, got %d", l.Firing.Burst)
	}
	return nil
}

// apply returns l with o's fields over it.
func (o Overrides) apply(l Limits) Limits {
	if o.MaxJobs != nil {
		l.MaxJobs = *o.MaxJobs
	}
	if o.MinInterval != nil {
		l.MinInterval = *o.MinInterval
	}
	if o.CreatesPerMinute != nil {
		l.CreatesPerMinute = *o.CreatesPerMinute
	}
	if o.FiringRate != nil {
		l.Firing.Rate = *o.FiringRate
	}
	if o.FiringBurst != nil {
		l.Firing.Burst = *o.FiringBurst
	}
	return l
}

// norm gives a firing rate without a burst a burst of 1.
func (l Limits) norm() Limits {
	if l.Firing.Rate > 0 && l.Firing.Burst < 1 {
		l.Firing.Burst = 1
	}
	return l
}

// Tenants are every tenant's Limits, resolved once.
type Tenants struct {
	defaults Limits
	tenants  map[string]Limits
}

// Resolve returns the tenants' limits: defaults (the flags), then f's
// defaults over them, then each tenant's overrides over those. The first
// negative limit is an error naming its place.
func Resolve(defaults Limits, f File) (*Tenants, error) {
	if err := defaults.Validate(); err != nil {
		return nil, fmt.Errorf("defaults: %w", err)
	}
	d := f.Defaults.apply(defaults)
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("quotas file defaults: %w", err)
	}
	q := &Tenants{defaults: d.norm(), tenants: map[string]Limits{}}
	names := make([]string, 0, len(f.Tenants))
	for t := range f.Tenants {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		l := f.Tenants[t].apply(d)
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("quotas of tenant %s: %w", t, err)
		}
		q.tenants[t] = l.norm()
	}
	return q, nil
}

// For returns the tenant's limits. A nil Tenants limits nothing.
func (q *Tenants) For(tenant string) Limits {
	if q == nil {
		return Limits{}
	}
	if l, ok := q.tenants[tenant]; ok {
		return l
	}
	return q.defaults
}

// Defaults are the limits of tenants without overrides.
func (q *Tenants) Defaults() Limits {
	if q == nil {
		return Limits{}
	}
	return q.defaults
}

// Overridden lists the tenants with their own limits, sorted, for logging.
func (q *Tenants) Overridden() []string {
	if q == nil {
		return nil
	}
	out := make([]string, 0, len(q.tenants))
	for t := range q.tenants {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// FiringLimited reports whether any tenant has a firing-rate quota.
func (q *Tenants) FiringLimited() bool {
	if q == nil {
		return false
	}
	if q.defaults.Firing.Rate > 0 {
		return true
	}
	for _, l := range q.tenants {
		if l.Firing.Rate > 0 {
			return true
		}
	}
	return false
}
