// Package quota holds the api's per-tenant quotas and the checks against
// them: how many jobs a tenant may have, how often its schedules may fire,
// and how fast it may create jobs.
//
// Limits come from configuration (flags for the defaults, a YAML file for
// defaults and per-tenant overrides), loaded once in main. The checks are
// pure: the counts they compare against are read by the store inside the
// create's transaction, under a per-tenant advisory lock, so the limits
// hold across any number of api replicas and a refused request writes
// nothing.
package quota

import (
	"fmt"
	"sort"
	"time"

	"github.com/sundialhq/sundial/pkg/quotas"
	"github.com/sundialhq/sundial/pkg/schedule"
)

// Quota names, as they appear in errors, metrics and the quotas file.
const (
	MaxJobs     = "max_jobs"
	MinInterval = "min_interval"
	CreateRate  = "create_rate"
)

// Defaults when nothing is configured.
const (
	DefaultMaxJobs          = 100_000
	DefaultMinInterval      = time.Second
	DefaultCreatesPerMinute = 6_000 // 100 per second on average
)

// GapHorizon is how many consecutive gaps MinIntervalCheck examines: a
// schedule's next GapHorizon+1 slots (a cron expression can bunch its
// slots, so the first gap is not enough; slots further away than this are
// not examined).
const GapHorizon = 1000

// CreateRateWindow is the sliding window the create rate is counted over.
const CreateRateWindow = time.Minute

// Limits are one tenant's quotas. A zero field means no limit.
type Limits struct {
	// MaxJobs bounds the tenant's jobs that are not deleted (active,
	// paused and completed ones count until purged).
	MaxJobs int
	// MinInterval is the smallest gap allowed between two consecutive
	// slots of one job's schedule.
	MinInterval time.Duration
	// CreatesPerMinute bounds job creations in any sliding minute.
	CreatesPerMinute int
}

// DefaultLimits are the built-in defaults.
func DefaultLimits() Limits {
	return Limits{MaxJobs: DefaultMaxJobs, MinInterval: DefaultMinInterval, CreatesPerMinute: DefaultCreatesPerMinute}
}

// Validate names the first negative limit.
func (l Limits) Validate() error {
	switch {
	case l.MaxJobs < 0:
		return fmt.Errorf("%s must not be negative, got %d", MaxJobs, l.MaxJobs)
	case l.MinInterval < 0:
		return fmt.Errorf("%s must not be negative, got %s", MinInterval, l.MinInterval)
	case l.CreatesPerMinute < 0:
		return fmt.Errorf("create_rate_per_minute must not be negative, got %d", l.CreatesPerMinute)
	}
	return nil
}

// Overrides is a partial Limits, as written in the quotas file (package
// pkg/quotas holds the format, which the worker reads too): unset fields
// keep the value beneath; the worker's keys are ignored here.
type Overrides = quotas.Overrides

func apply(o Overrides, l Limits) Limits {
	if o.MaxJobs != nil {
		l.MaxJobs = *o.MaxJobs
	}
	if o.MinInterval != nil {
		l.MinInterval = *o.MinInterval
	}
	if o.CreatesPerMinute != nil {
		l.CreatesPerMinute = *o.CreatesPerMinute
	}
	return l
}

// File is the quotas file (pkg/quotas.File).
type File = quotas.File

// ParseFile reads a quotas file; unknown keys are errors, so a misspelt
// quota does not silently fall back to its default.
func ParseFile(b []byte) (File, error) { return quotas.ParseFile(b) }

// LoadFile reads and parses the quotas file at path.
func LoadFile(path string) (File, error) { return quotas.LoadFile(path) }

// Quotas resolves each tenant's limits.
type Quotas struct {
	defaults Limits
	tenants  map[string]Limits
}

// New returns the quotas: defaults, then f's defaults over them, then each
// tenant's overrides over those.
func New(defaults Limits, f File) (*Quotas, error) {
	q := &Quotas{defaults: apply(f.Defaults, defaults), tenants: map[string]Limits{}}
	if err := q.defaults.Validate(); err != nil {
		return nil, fmt.Errorf("quota defaults: %w", err)
	}
	names := make([]string, 0, len(f.Tenants))
	for t := range f.Tenants {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		l := apply(f.Tenants[t], q.defaults)
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("quotas of tenant %s: %w", t, err)
		}
		q.tenants[t] = l
	}
	return q, nil
}

// For returns the tenant's limits. A nil Quotas limits nothing.
func (q *Quotas) For(tenant string) Limits {
	if q == nil {
		return Limits{}
	}
	if l, ok := q.tenants[tenant]; ok {
		return l
	}
	return q.defaults
}

// Defaults are the limits of tenants without overrides.
func (q *Quotas) Defaults() Limits {
	if q == nil {
		return Limits{}
	}
	return q.defaults
}

// Overridden lists the tenants with their own limits, sorted, for logging.
func (q *Quotas) Overridden() []string {
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

// ExceededError is a quota a request would exceed. The api answers it with
// ResourceExhausted; the message names the quota first.
type ExceededError struct {
	// Quota is MaxJobs, MinInterval or CreateRate.
	Quota  string
	Tenant string
	msg    string
}

func (e *ExceededError) Error() string { return "quota " + e.Quota + ": " + e.msg }

func exceeded(quota, tenant, format string, args ...any) error {
	return &ExceededError{Quota: quota, Tenant: tenant, msg: fmt.Sprintf(format, args...)}
}

// CheckCreate checks one more job fits the tenant's max_jobs and
// create_rate, given its usage counted up to the limits (see Usage).
func (l Limits) CheckCreate(tenant string, jobs, createdLastMinute int) error {
	if l.MaxJobs > 0 && jobs >= l.MaxJobs {
		return exceeded(MaxJobs, tenant, "tenant %s has %d jobs (limit %d); delete some, or ask for a higher limit", tenant, jobs, l.MaxJobs)
	}
	if l.CreatesPerMinute > 0 && createdLastMinute >= l.CreatesPerMinute {
		return exceeded(CreateRate, tenant, "tenant %s created %d jobs in the last minute (limit %d per minute); retry later", tenant, createdLastMinute, l.CreatesPerMinute)
	}
	return nil
}

// CheckInterval checks that no two consecutive slots of sch among the next
// GapHorizon+1 after from are closer than the tenant's min_interval.
func (l Limits) CheckInterval(tenant string, sch schedule.Schedule, from time.Time) error {
	if l.MinInterval <= 0 {
		return nil
	}
	a, b, gap, ok := SmallestGap(sch, from, GapHorizon)
	if !ok || gap >= l.MinInterval {
		return nil
	}
	return exceeded(MinInterval, tenant, "the schedule fires %s apart (%s and %s); tenant %s's minimum interval is %s",
		gap, a.UTC().Format(time.RFC3339), b.UTC().Format(time.RFC3339), tenant, l.MinInterval)
}

// SmallestGap returns the closest pair of consecutive slots among the first
// n+1 slots of sch after from, and their gap; ok is false when the schedule
// has fewer than two slots left.
func SmallestGap(sch schedule.Schedule, from time.Time, n int) (a, b time.Time, gap time.Duration, ok bool) {
	prev := time.Time{}
	for t := range schedule.Preview(sch, from, n+1) {
		if !prev.IsZero() {
			if d := t.Sub(prev); !ok || d < gap {
				a, b, gap, ok = prev, t, d, true
			}
		}
		prev = t
	}
	return a, b, gap, ok
}
