// Package quotas is the quotas file operators write: the defaults and the
// per-tenant overrides of every per-tenant limit, read by the api (how
// many jobs, how close their slots, how fast they are created: package
// services/api/internal/quota enforces those) and by the worker (how fast
// a tenant's firings may go out: FiringRates here).
//
// One file, one format, so an operator configures a tenant in one place;
// each reader ignores the keys the other enforces, and neither accepts a
// key it does not know.
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
	// The api's (services/api/internal/quota).
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

// FiringRate is a tenant's firing-rate quota: Rate firings a second on
// average, Burst at once above it. A zero Rate limits nothing.
type FiringRate struct {
	Rate  float64
	Burst int
}

// Validate names the first bad field.
func (r FiringRate) Validate() error {
	switch {
	case r.Rate < 0:
		return fmt.Errorf("firing_rate_per_second must not be negative, got %g", r.Rate)
	case r.Burst < 0:
		return fmt.Errorf("firing_burst must not be negative, got %d", r.Burst)
	}
	return nil
}

func (o Overrides) applyFiring(r FiringRate) FiringRate {
	if o.FiringRate != nil {
		r.Rate = *o.FiringRate
	}
	if o.FiringBurst != nil {
		r.Burst = *o.FiringBurst
	}
	return r
}

// FiringRates resolves each tenant's firing-rate quota.
type FiringRates struct {
	defaults FiringRate
	tenants  map[string]FiringRate
}

// NewFiringRates returns the firing-rate quotas: defaults, then f's
// defaults over them, then each tenant's overrides over those. A burst
// under 1 with a rate is 1.
func NewFiringRates(defaults FiringRate, f File) (*FiringRates, error) {
	norm := func(r FiringRate) FiringRate {
		if r.Rate > 0 && r.Burst < 1 {
			r.Burst = 1
		}
		return r
	}
	if err := defaults.Validate(); err != nil {
		return nil, fmt.Errorf("firing-rate defaults: %w", err)
	}
	d := f.Defaults.applyFiring(defaults)
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("quotas file defaults: %w", err)
	}
	q := &FiringRates{defaults: norm(d), tenants: map[string]FiringRate{}}
	names := make([]string, 0, len(f.Tenants))
	for t := range f.Tenants {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		o := f.Tenants[t]
		if o.FiringRate == nil && o.FiringBurst == nil {
			continue
		}
		r := o.applyFiring(d)
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("quotas of tenant %s: %w", t, err)
		}
		q.tenants[t] = norm(r)
	}
	return q, nil
}

// For returns the tenant's quota. A nil FiringRates limits nothing.
func (q *FiringRates) For(tenant string) FiringRate {
	if q == nil {
		return FiringRate{}
	}
	if r, ok := q.tenants[tenant]; ok {
		return r
	}
	return q.defaults
}

// Limited reports whether any tenant has a firing-rate quota.
func (q *FiringRates) Limited() bool {
	if q == nil {
		return false
	}
	if q.defaults.Rate > 0 {
		return true
	}
	for _, r := range q.tenants {
		if r.Rate > 0 {
			return true
		}
	}
	return false
}
