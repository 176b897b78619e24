package console

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Banners: after an action the console redirects to a page with ?done=
// naming what happened, and the page shows a notice for it. The notice
// is never the parameter's text: done is a code from the fixed table
// below, its figures are digits, its field names come from the edit
// form's fixed set and an execution id must look like one. An unknown
// code, or a figure that is not one, shows nothing, so a crafted link
// cannot put words of its own in the console's voice.

// notice is what a redirect after an action carries.
type notice struct {
	code      string
	n, m, k   int64    // counts: changed, already so, refused
	fields    []string // update mask paths
	execution string
}

// values is the notice as query parameters.
func (n notice) values() url.Values {
	q := url.Values{"done": {n.code}}
	for name, v := range map[string]int64{"n": n.n, "m": n.m, "k": n.k} {
		if v != 0 {
			q.Set(name, strconv.FormatInt(v, 10))
		}
	}
	if len(n.fields) > 0 {
		q.Set("fields", strings.Join(n.fields, ","))
	}
	if n.execution != "" {
		q.Set("execution", n.execution)
	}
	return q
}

// query is the notice as a query string, without the "?".
func (n notice) query() string { return n.values().Encode() }

// banners are the notices by code; each formats the checked parameters.
var banners = map[string]func(p notice) string{
	"created":   func(notice) string { return "Job created." },
	"paused":    func(notice) string { return "Job paused." },
	"resumed":   func(notice) string { return "Job resumed." },
	"deleted":   func(notice) string { return "Job deleted." },
	"unchanged": func(notice) string { return "Job unchanged." },
	"updated": func(p notice) string {
		if len(p.fields) == 0 {
			return "Job updated."
		}
		return "Job updated: " + strings.Join(p.fields, ", ") + "."
	},
	"triggered": func(p notice) string {
		if p.execution == "" {
			return "Job triggered."
		}
		return "Job triggered: execution " + p.execution + "."
	},
	"cancel-requested": func(p notice) string {
		return "Cancel requested: execution " + p.execution + " (it is recorded cancelled once its worker stops it)."
	},
	"backfilled":  func(p notice) string { return fmt.Sprintf("Job backfilled: %d firing(s) staged.", p.n) },
	"redriven":    func(p notice) string { return fmt.Sprintf("Re-driven: %d dead letter(s).", p.n) },
	"bulk-paused": func(p notice) string { return bulkText("Paused", p) },
	"bulk-resumed": func(p notice) string {
		return bulkText("Resumed", p)
	},
	"bulk-deleted": func(p notice) string { return bulkText("Deleted", p) },
	"sessions-ended": func(p notice) string {
		return fmt.Sprintf("Ended %d session(s) of the tenant.", p.n)
	},
}

func bulkText(verb string, p notice) string {
	s := fmt.Sprintf("%s: %s job(s)", verb, thousands(p.n))
	if p.m > 0 {
		s += fmt.Sprintf(", %s already so", thousands(p.m))
	}
	if p.k > 0 {
		s += fmt.Sprintf("; %s refused (the list shows which are left)", thousands(p.k))
	}
	return s + "."
}

// editPaths are the update mask paths the edit form can produce
// (changedPaths, scheduleChanges): the only field names a notice shows.
var editPaths = map[string]bool{}

func init() {
	for _, p := range []string{"name", "schedule.cron", "schedule.once", "schedule.interval", "schedule.rrule",
		"schedule.timezone", "schedule.start_time", "schedule.end_time", "schedule.dst_gap", "schedule.dst_repeat",
		"schedule.calendar", "schedule.calendar_policy", "target", "target.kafka.topic", "target.kafka.key",
		"target.http.url", "target.http.method", "target.http.headers", "retry.max_attempts", "retry.backoff",
		"retry.initial_delay", "retry.max_delay", "misfire.action", "misfire.grace", "misfire.max_catch_up",
		"overlap", "attempt_timeout", "max_jitter", "callback_url", "payload", "priority", "labels"} {
		editPaths[p] = true
	}
}

// executionID is the shape of an execution id: a UUID (pkg/domain/firing).
var executionID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// bannerOf is the notice q asks for, "" when q names none the console
// knows or its parameters are not what the console puts there.
func bannerOf(q url.Values) string {
	f, ok := banners[q.Get("done")]
	if !ok {
		return ""
	}
	p := notice{code: q.Get("done")}
	for name, dst := range map[string]*int64{"n": &p.n, "m": &p.m, "k": &p.k} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || strconv.FormatInt(n, 10) != v {
			return ""
		}
		*dst = n
	}
	if v := q.Get("fields"); v != "" {
		for _, path := range strings.Split(v, ",") {
			if !editPaths[path] {
				return ""
			}
			p.fields = append(p.fields, path)
		}
	}
	if v := q.Get("execution"); v != "" {
		if !executionID.MatchString(v) {
			return ""
		}
		p.execution = v
	} else if p.code == "cancel-requested" {
		return ""
	}
	return f(p)
}
