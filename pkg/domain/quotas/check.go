package quotas

import (
	"fmt"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/schedule"
)

// Names of the job quotas, as they appear in errors, metrics and the
// quotas file.
const (
	MaxJobs     = "max_jobs"
	MinInterval = "min_interval"
	CreateRate  = "create_rate"
)

// GapHorizon is how many consecutive gaps CheckInterval examines: a
// schedule's next GapHorizon+1 slots (a cron expression can bunch its
// slots, so the first gap is not enough; slots further away than this are
// not examined).
const GapHorizon = 1000

// CreateRateWindow is the sliding window the create rate is counted over.
const CreateRateWindow = time.Minute

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
// create_rate, given its usage counted up to the limits: its jobs, and
// those it created in the last CreateRateWindow. The api counts them in
// the create's transaction, under a per-tenant advisory lock, so the
// limits hold across any number of api replicas and a refused request
// writes nothing.
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
