package jobspec

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Limits on a job's fields. They keep one job from dominating a Kafka record,
// an outbox row or a worker's memory, and they are documented in
// docs/architecture/api.md.
const (
	MaxNameLen        = 256
	MaxLabels         = 64
	MaxLabelKeyLen    = 128
	MaxLabelValueLen  = 256
	MaxPayloadBytes   = 256 << 10
	MaxURLLen         = 2048
	MaxHeaders        = 64
	MaxHeaderBytes    = 16 << 10 // names and values together
	MaxKafkaKeyLen    = 1024
	MaxAttempts       = 50
	MaxCatchUp        = 1000
	MinInterval       = time.Second
	MaxJitter         = 60 * time.Second
	MaxAttemptTimeout = time.Hour
	MaxInitialDelay   = time.Hour
	MaxRetryDelay     = 24 * time.Hour
	MaxMisfireGrace   = 7 * 24 * time.Hour
)

// FieldViolation is one problem with one field of a job.
type FieldViolation struct {
	// Field is the path inside the job, e.g. "schedule.cron" or
	// `target.http.headers["X-Token"]`.
	Field string
	// Description says what is wrong, for a human.
	Description string
}

// Error is every problem Validate found in a job.
type Error struct {
	Violations []FieldViolation
}

func (e *Error) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.Field + ": " + v.Description
	}
	return strings.Join(parts, "; ")
}

// collector accumulates violations under a field path prefix.
type collector struct {
	vs *[]FieldViolation
}

func (c collector) add(field, format string, args ...any) {
	*c.vs = append(*c.vs, FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

func (c collector) err() error {
	if len(*c.vs) == 0 {
		return nil
	}
	return &Error{Violations: *c.vs}
}

// Validate checks a job as a client submitted it, before or after
// Normalize: unset fields are valid (they take their defaults), set ones must
// make sense. Output-only fields (id, tenant, status, version, times) are not
// checked; the server owns them. The error is an *Error listing every
// problem.
func Validate(job *sundialv1.Job) error {
	c := collector{vs: new([]FieldViolation)}
	if job == nil {
		c.add("job", "is required")
		return c.err()
	}
	validateName(c, job.GetName())
	validateLabels(c, "labels", job.GetLabels())
	if job.GetSchedule() == nil {
		c.add("schedule", "is required: set one of cron, once, interval or rrule")
	} else {
		// A new job has no id yet; H is checked with a stand-in seed
		// (only the slot depends on it), and the create resolves it from
		// the id it gives the job (Schedule).
		seed := cmp.Or(job.GetId(), "validation")
		validateSchedule(c, "schedule", job.GetSchedule(), seed)
		validateAdditional(c, "schedule", job.GetSchedule(), seed)
		validateExclusions(c, "schedule", job.GetSchedule())
	}
	validateMaxRuns(c, job.GetMaxRuns())
	validateTarget(c, job.GetTarget())
	if n := len(job.GetPayload()); n > MaxPayloadBytes {
		c.add("payload", "is %d bytes, at most %d allowed", n, MaxPayloadBytes)
	}
	if !validEnum(int32(job.GetPriority()), sundialv1.Priority_name) {
		c.add("priority", "unknown value %d", job.GetPriority())
	}
	validateRetry(c, job.GetRetry())
	if d := job.GetAttemptTimeout(); d != nil {
		durationIn(c, "attempt_timeout", d, time.Nanosecond, MaxAttemptTimeout, "must be greater than 0 and at most %s", MaxAttemptTimeout)
	}
	validateMisfire(c, job.GetMisfire())
	if !validEnum(int32(job.GetOverlap()), sundialv1.OverlapPolicy_name) {
		c.add("overlap", "unknown value %d", job.GetOverlap())
	}
	validateConcurrency(c, job.GetMaxConcurrency(), job.GetOverlap())
	if d := job.GetMaxJitter(); d != nil {
		durationIn(c, "max_jitter", d, 0, MaxJitter, "must be between 0 and 60s")
	}
	if u := job.GetCallbackUrl(); u != "" {
		if msg := checkHTTPURL(u); msg != "" {
			c.add("callback_url", "%s", msg)
		}
	}
	return c.err()
}

// ValidateSchedule checks a schedule on its own (PreviewSchedule); fields
// are named under "schedule".
func ValidateSchedule(s *sundialv1.Schedule) error {
	c := collector{vs: new([]FieldViolation)}
	if s == nil {
		c.add("schedule", "is required: set one of cron, once, interval or rrule")
		return c.err()
	}
	validateSchedule(c, "schedule", s, "")
	validateAdditional(c, "schedule", s, "")
	validateExclusions(c, "schedule", s)
	return c.err()
}

func validateName(c collector, name string) {
	switch {
	case !utf8.ValidString(name):
		c.add("name", "must be valid UTF-8")
	case utf8.RuneCountInString(name) > MaxNameLen:
		c.add("name", "is %d characters, at most %d allowed", utf8.RuneCountInString(name), MaxNameLen)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		c.add("name", "must not contain control characters")
	}
}

// ValidateLabels checks a label map (also used for ListJobs filters); field
// names the map, e.g. "labels".
func ValidateLabels(field string, labels map[string]string) error {
	c := collector{vs: new([]FieldViolation)}
	validateLabels(c, field, labels)
	return c.err()
}

func validateLabels(c collector, field string, labels map[string]string) {
	if len(labels) > MaxLabels {
		c.add(field, "has %d labels, at most %d allowed", len(labels), MaxLabels)
		return
	}
	for _, k := range sortedKeys(labels) {
		v := labels[k]
		f := fmt.Sprintf("%s[%q]", field, k)
		if k == "" || len(k) > MaxLabelKeyLen || !isLabelKey(k) {
			c.add(f, "key must be 1-%d characters of letters, digits and . _ - /", MaxLabelKeyLen)
		}
		if len(v) > MaxLabelValueLen || !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0 {
			c.add(f, "value must be at most %d bytes of UTF-8 without control characters", MaxLabelValueLen)
		}
	}
}

func isLabelKey(k string) bool {
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' || r == '/') {
			return false
		}
	}
	return true
}

// seed is what H hashes; "" refuses H, naming the field.
func validateSchedule(c collector, field string, s *sundialv1.Schedule, seed string) {
	loc, tzErr := location(s.GetTimezone())
	if tzErr != nil {
		c.add(field+".timezone", "%v", tzErr)
	}
	if !validEnum(int32(s.GetDstGap()), sundialv1.DstGapPolicy_name) {
		c.add(field+".dst_gap", "unknown value %d", s.GetDstGap())
	}
	if !validEnum(int32(s.GetDstRepeat()), sundialv1.DstRepeatPolicy_name) {
		c.add(field+".dst_repeat", "unknown value %d", s.GetDstRepeat())
	}
	validateCalendarRef(c, field, s)
	var start, end time.Time
	if ts := s.GetStartTime(); ts != nil && timestampOK(c, field+".start_time", ts) {
		start = ts.AsTime()
	}
	if ts := s.GetEndTime(); ts != nil && timestampOK(c, field+".end_time", ts) {
		end = ts.AsTime()
	}
	if !start.IsZero() && !end.IsZero() && !end.After(start) {
		c.add(field+".end_time", "must be after start_time")
	}
	opts := schedule.Options{Location: loc, Gap: gapPolicy(s.GetDstGap()), Repeat: repeatPolicy(s.GetDstRepeat()), Start: start, End: end, HashSeed: seed}
	switch spec := s.GetSpec().(type) {
	case nil:
		c.add(field, "set one of cron, once, interval or rrule")
	case *sundialv1.Schedule_Cron:
		expr := strings.TrimSpace(spec.Cron)
		if expr == "" {
			c.add(field+".cron", "must not be empty")
			return
		}
		if tzErr != nil {
			// The expression is evaluated in the zone; without one, the
			// zone's error already says what to fix.
			opts.Location = time.UTC
		}
		if _, err := schedule.Parse(expr, opts); err != nil {
			c.add(field+".cron", "%s", cronProblem(err))
		}
	case *sundialv1.Schedule_Once:
		timestampOK(c, field+".once", spec.Once)
	case *sundialv1.Schedule_Interval:
		if !durationIn(c, field+".interval", spec.Interval, MinInterval, 0, "must be at least %s", MinInterval) {
			return
		}
		if spec.Interval.AsDuration()%time.Second != 0 {
			// Every slot Sundial stages is addressed to the second.
			c.add(field+".interval", "must be a whole number of seconds, got %s", spec.Interval.AsDuration())
			return
		}
		if _, err := schedule.Every(spec.Interval.AsDuration(), anchorFor(s, time.Unix(0, 0)), opts); err != nil {
			c.add(field+".interval", "%v", err)
		}
	case *sundialv1.Schedule_Rrule:
		text := strings.TrimSpace(spec.Rrule)
		if text == "" {
			c.add(field+".rrule", "must not be empty")
			return
		}
		if tzErr != nil {
			opts.Location = time.UTC
		}
		// DTSTART is start_time or the creation time, which is not known
		// yet: without start_time, check the rule from the epoch but leave
		// "never fires" to the caller that knows the creation time
		// (whether a rule with INTERVAL ever meets a leap day depends on
		// the year it starts).
		_, err := schedule.ParseRRule(text, anchorFor(s, time.Unix(0, 0)), opts)
		if err != nil && (s.GetStartTime() != nil || !errors.Is(err, schedule.ErrNeverFires)) {
			c.add(field+".rrule", "%s", rruleProblem(err))
		}
	}
}

// CalendarNamePattern is what a business calendar's name looks like; the
// calendars table checks the same.
const CalendarNamePattern = `^[a-z0-9][a-z0-9_-]{0,62}$`

var calendarName = regexp.MustCompile(CalendarNamePattern)

// ValidCalendarName reports whether name can name a calendar.
func ValidCalendarName(name string) bool { return calendarName.MatchString(name) }

// validateCalendarRef checks the schedule's calendar reference and policy
// as far as they go without the tenant's calendars; that the calendar
// exists (and is the caller's) is the api's check.
func validateCalendarRef(c collector, field string, s *sundialv1.Schedule) {
	name, p := s.GetCalendar(), s.GetCalendarPolicy()
	if name != "" && !ValidCalendarName(name) {
		c.add(field+".calendar", "%q is not a calendar name: 1-63 lowercase letters, digits, '-' or '_', starting with a letter or digit", name)
	}
	if !validEnum(int32(p), sundialv1.CalendarPolicy_name) {
		c.add(field+".calendar_policy", "unknown value %d: want SKIP, MOVE_NEXT or MOVE_PREVIOUS", p)
	} else if name == "" && p != sundialv1.CalendarPolicy_CALENDAR_POLICY_UNSPECIFIED {
		c.add(field+".calendar_policy", "is set but schedule.calendar is empty: name the calendar whose days it applies to")
	}
}

// rruleProblem is the engine's description of a bad recurrence rule, e.g.
// "BYSETPOS needs another BY rule".
func rruleProblem(err error) string {
	var pe *schedule.ParseError
	if errors.As(err, &pe) {
		return pe.Reason
	}
	return err.Error()
}

// cronProblem is the engine's description of a bad expression without
// repeating a package prefix, e.g. "day-of-month: 32 is out of range 1-31".
func cronProblem(err error) string {
	var pe *schedule.ParseError
	if errors.As(err, &pe) {
		return strings.TrimPrefix(pe.Error(), "schedule: ")
	}
	return strings.TrimPrefix(err.Error(), "schedule: ")
}

func validateTarget(c collector, t *sundialv1.Target) {
	switch kind := t.GetKind().(type) {
	case nil:
		c.add("target", "is required: set http or kafka")
	case *sundialv1.Target_Http:
		h := kind.Http
		if h == nil {
			c.add("target.http", "is required")
			return
		}
		if msg := checkHTTPURL(h.GetUrl()); msg != "" {
			c.add("target.http.url", "%s", msg)
		}
		if m := h.GetMethod(); m != "" && !httpMethods[strings.ToUpper(m)] {
			c.add("target.http.method", "must be one of GET, POST, PUT, PATCH, DELETE, got %q", m)
		}
		validateHeaders(c, h.GetHeaders())
		if u := h.GetCancelUrl(); u != "" {
			if msg := checkHTTPURL(u); msg != "" {
				c.add("target.http.cancel_url", "%s", msg)
			}
		}
	case *sundialv1.Target_Kafka:
		k := kind.Kafka
		if k == nil {
			c.add("target.kafka", "is required")
			return
		}
		if msg := checkTopic(k.GetTopic()); msg != "" {
			c.add("target.kafka.topic", "%s", msg)
		}
		if len(k.GetKey()) > MaxKafkaKeyLen {
			c.add("target.kafka.key", "is %d bytes, at most %d allowed", len(k.GetKey()), MaxKafkaKeyLen)
		}
	}
}

var httpMethods = map[string]bool{"GET": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true}

// checkHTTPURL returns "" for a URL the worker can send to as written
// (CheckURL), else what is wrong.
func checkHTTPURL(raw string) string {
	if err := CheckURL(raw); err != nil {
		return err.Error()
	}
	return ""
}

// Headers the worker sets itself, or that belong to the transport.
var reservedHeaders = map[string]bool{
	"idempotency-key":   true,
	"host":              true,
	"content-length":    true,
	"transfer-encoding": true,
	"connection":        true,
	"upgrade":           true,
	"te":                true,
	"trailer":           true,
}

func validateHeaders(c collector, headers map[string]string) {
	if len(headers) > MaxHeaders {
		c.add("target.http.headers", "has %d headers, at most %d allowed", len(headers), MaxHeaders)
		return
	}
	total := 0
	for _, name := range sortedKeys(headers) {
		value := headers[name]
		total += len(name) + len(value)
		f := fmt.Sprintf("target.http.headers[%q]", name)
		lower := strings.ToLower(name)
		switch {
		case !isToken(name):
			c.add(f, "is not a valid HTTP header name")
		case reservedHeaders[lower] || strings.HasPrefix(lower, "sundial-"):
			c.add(f, "is set by Sundial and cannot be overridden")
		}
		if !validHeaderValue(value) {
			c.add(f, "value must not contain CR, LF, NUL or other control characters (tab is allowed)")
		}
		if _, err := scanSecretRefs(value); err != nil {
			// The message says where, never what: header values are
			// sensitive.
			c.add(f, "value has a %v", err)
		}
	}
	if total > MaxHeaderBytes {
		c.add("target.http.headers", "are %d bytes together, at most %d allowed", total, MaxHeaderBytes)
	}
}

// validHeaderValue reports whether net/http will send v as a header value:
// no control character but horizontal tab (RFC 9110 field-value). CR, LF
// and NUL would split or end the header; the others make the worker's
// request fail at every attempt, long after the job was accepted.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

// isToken reports whether s is an RFC 9110 token (a valid header name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0 {
			continue
		}
		return false
	}
	return true
}

func checkTopic(topic string) string {
	if topic == "" {
		return "is required"
	}
	if len(topic) > 249 {
		return fmt.Sprintf("is %d characters, at most 249 allowed", len(topic))
	}
	if topic == "." || topic == ".." {
		return "must not be . or .."
	}
	for _, r := range topic {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return "must contain only letters, digits and . _ -"
		}
	}
	if strings.HasPrefix(topic, "__") {
		return "must not name a Kafka internal topic"
	}
	return ""
}

func validateRetry(c collector, r *sundialv1.RetryPolicy) {
	if r == nil {
		return
	}
	if n := r.GetMaxAttempts(); n < 0 || n > MaxAttempts {
		c.add("retry.max_attempts", "must be between 1 and %d (0 means 1), got %d", MaxAttempts, n)
	}
	if !validEnum(int32(r.GetBackoff()), sundialv1.Backoff_name) {
		c.add("retry.backoff", "unknown value %d", r.GetBackoff())
	}
	initial := DefaultInitialDelay
	if d := r.GetInitialDelay(); d != nil {
		if durationIn(c, "retry.initial_delay", d, 0, MaxInitialDelay, "must be between 0 and %s", MaxInitialDelay) {
			initial = d.AsDuration()
		}
	}
	if d := r.GetMaxDelay(); d != nil {
		if durationIn(c, "retry.max_delay", d, 0, MaxRetryDelay, "must be between 0 and %s", MaxRetryDelay) && d.AsDuration() < initial {
			c.add("retry.max_delay", "must not be less than initial_delay (%s)", initial)
		}
	} else if initial > DefaultMaxDelay {
		c.add("retry.max_delay", "must be set when initial_delay (%s) exceeds the default max_delay (%s)", initial, DefaultMaxDelay)
	}
}

func validateMisfire(c collector, m *sundialv1.MisfirePolicy) {
	if m == nil {
		return
	}
	if !validEnum(int32(m.GetAction()), sundialv1.MisfireAction_name) {
		c.add("misfire.action", "unknown value %d", m.GetAction())
	}
	if d := m.GetGrace(); d != nil {
		durationIn(c, "misfire.grace", d, 0, MaxMisfireGrace, "must be between 0 and %s", MaxMisfireGrace)
	}
	if n := m.GetMaxCatchUp(); n < 0 || n > MaxCatchUp {
		c.add("misfire.max_catch_up", "must be between 1 and %d (0 means %d), got %d", MaxCatchUp, DefaultMaxCatchUp, n)
	}
}

// durationIn checks d is a valid duration within [lo, hi] (hi 0 = no upper
// bound) and records msg otherwise. It reports whether d was fine.
func durationIn(c collector, field string, d *durationpb.Duration, lo, hi time.Duration, msg string, args ...any) bool {
	if err := d.CheckValid(); err != nil {
		c.add(field, "is not a valid duration")
		return false
	}
	v := d.AsDuration()
	if v < lo || (hi > 0 && v > hi) {
		c.add(field, msg+", got %s", append(args, v)...)
		return false
	}
	return true
}

func timestampOK(c collector, field string, ts *timestamppb.Timestamp) bool {
	if err := ts.CheckValid(); err != nil {
		c.add(field, "is not a valid timestamp")
		return false
	}
	return true
}

func validEnum(v int32, names map[int32]string) bool {
	_, ok := names[v]
	return ok
}

// location resolves an IANA zone name; "" is UTC. "Local" is refused: it
// would mean whatever zone each server happens to run in.
func location(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, errors.New(`"Local" depends on the server; name an IANA zone such as "Europe/Paris"`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IANA time zone", name)
	}
	return loc, nil
}

// MaxConcurrency bounds a job's max_concurrency: each running execution is
// an entry in the job's running set, read by every lease call of the job.
const MaxConcurrency = 100

// validateConcurrency checks max_concurrency: 0 (one) to MaxConcurrency,
// and above 1 only with an overlap policy that limits (under ALLOW
// executions run side by side without a limit, so a number would say
// nothing).
func validateConcurrency(c collector, n int32, overlap sundialv1.OverlapPolicy) {
	switch {
	case n < 0 || n > MaxConcurrency:
		c.add("max_concurrency", "must be between 0 and %d, got %d", MaxConcurrency, n)
	case n > 1 && (overlap == sundialv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED || overlap == sundialv1.OverlapPolicy_OVERLAP_POLICY_ALLOW):
		c.add("max_concurrency", "is %d, which needs an overlap policy other than ALLOW (SKIP, BUFFER_ONE, BUFFER_ALL, CANCEL_OTHER or TERMINATE_OTHER decides what the execution beyond it does)", n)
	}
}
