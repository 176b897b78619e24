// Package misfire is a job's misfire policy: the defaults it falls back
// to, how many missed slots each action replays, and the ledger's reason
// for every slot it does not. One home for the policy, so that the
// prefetcher judging slots that went by unstaged and the worker judging
// firings that reach it late say the same thing about the same job.
//
// A slot is missed when it is older than the misfire threshold (ordinary
// lateness is not a misfire) and expired when it is older than the grace:
//
//	      expired         missed (policy)       late     on time
//	──────────────────┼──────────────────────┼─────────┼────────────┤
//	              now-grace          now-threshold      now
//
// Expired slots never run. Of the missed ones, SKIP runs none, RUN_ONCE
// the most recent one and RUN_ALL the most recent MaxCatchUp.
package misfire

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Defaults of a policy's unset fields (the api stores them in every job it
// normalizes; they matter for jobs and envelopes that predate a field).
const (
	DefaultAction     = sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE
	DefaultGrace      = time.Hour
	DefaultMaxCatchUp = 10
)

// Policy is a job's misfire policy with defaults applied.
type Policy struct {
	Action     sundialv1.MisfireAction
	Grace      time.Duration
	MaxCatchUp int
}

// Of reads a policy as a job or a firing envelope carries it; nil or unset
// fields take the defaults.
func Of(m *sundialv1.MisfirePolicy) Policy {
	p := Policy{Action: m.GetAction(), Grace: DefaultGrace, MaxCatchUp: int(m.GetMaxCatchUp())}
	if p.Action == sundialv1.MisfireAction_MISFIRE_ACTION_UNSPECIFIED {
		p.Action = DefaultAction
	}
	if m.GetGrace() != nil {
		p.Grace = m.GetGrace().AsDuration()
	}
	if p.MaxCatchUp <= 0 {
		p.MaxCatchUp = DefaultMaxCatchUp
	}
	return p
}

// Keep is how many of a job's missed slots the policy runs: the most
// recent ones.
func (p Policy) Keep() int {
	switch p.Action {
	case sundialv1.MisfireAction_MISFIRE_ACTION_SKIP:
		return 0
	case sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL:
		return p.MaxCatchUp
	default:
		return 1
	}
}

// Kind says why a slot did not run.
type Kind int

const (
	// Expired: older than the job's grace; never run.
	Expired Kind = iota + 1
	// NotReplayed: inside the grace, but the policy did not run it (SKIP,
	// RUN_ONCE's older slots, RUN_ALL's beyond the cap).
	NotReplayed
)

// String is the metric label of the kind.
func (k Kind) String() string {
	switch k {
	case Expired:
		return "expired"
	case NotReplayed:
		return "policy"
	default:
		return "unknown"
	}
}

// Reason is the ledger's reason for a slot that did not run for kind k.
func (p Policy) Reason(k Kind) string {
	if k == Expired {
		return "misfire: older than the grace of " + ShortDuration(p.Grace)
	}
	switch p.Action {
	case sundialv1.MisfireAction_MISFIRE_ACTION_SKIP:
		return "misfire: policy SKIP replays no missed slot"
	case sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL:
		return fmt.Sprintf("misfire: policy RUN_ALL replays only the %d most recent missed slots", p.MaxCatchUp)
	default:
		return "misfire: policy RUN_ONCE replays only the most recent missed slot"
	}
}

// Summary stands for skipped slots recorded as one ledger row.
type Summary struct {
	// First and Last are the oldest and newest slot it covers.
	First, Last time.Time
	// Expired and Policy count the covered slots by kind. When AtLeast,
	// Expired is a lower bound (the stretch was too long to count).
	Expired, Policy int
	AtLeast         bool
}

// Count is the number of slots the summary covers (a lower bound when
// AtLeast).
func (s Summary) Count() int { return s.Expired + s.Policy }

// SummaryReason is the ledger's reason on the row that stands for the
// summarized slots (recorded at the summary's first slot).
func (p Policy) SummaryReason(s Summary) string {
	return p.summaryReason(s, "skipped (only the most recent are recorded one by one)")
}

// LateSummaryReason is the ledger's reason on the row that stands for
// firings a worker received late and did not fire: a worker behind sheds
// thousands a second, and one row per job and few seconds keeps its
// bookkeeping from costing what it needs to catch up.
func (p Policy) LateSummaryReason(s Summary) string {
	return p.summaryReason(s, "reached the worker late and were skipped")
}

func (p Policy) summaryReason(s Summary, what string) string {
	var b strings.Builder
	n := strconv.Itoa(s.Count())
	if s.AtLeast {
		n = "at least " + n
	}
	fmt.Fprintf(&b, "misfire: %s slots from %s to %s %s:",
		n, s.First.UTC().Format(time.RFC3339Nano), s.Last.UTC().Format(time.RFC3339Nano), what)
	if s.Expired > 0 {
		fmt.Fprintf(&b, " %d older than the grace of %s;", s.Expired, ShortDuration(p.Grace))
	}
	if s.Policy > 0 {
		fmt.Fprintf(&b, " %d not replayed by policy %s;", s.Policy, strings.TrimPrefix(p.Action.String(), "MISFIRE_ACTION_"))
	}
	return strings.TrimSuffix(b.String(), ";")
}

// ShortDuration drops Go's zero tails: 1h0m0s reads 1h, 5m0s reads 5m.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
