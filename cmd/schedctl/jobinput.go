package main

// Building a sundial.v1.Job from a job file (-f, YAML or JSON) and from
// flags, and the update mask an update's flags imply.

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"gopkg.in/yaml.v3"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// kvFlag is a repeatable key=value flag.
type kvFlag map[string]string

func (k kvFlag) String() string {
	parts := make([]string, 0, len(k))
	for key, v := range k {
		parts = append(parts, key+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (k kvFlag) Set(s string) error {
	key, v, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	k[key] = v
	return nil
}

// jobFlags are the flags create and update share. Each maps to one field
// path of the job, which is also the update-mask path the flag implies.
type jobFlags struct {
	fs   *flag.FlagSet
	file string

	name, cron, once, every, rrule, timezone, start, end, dstGap, dstRepeat string
	calendar, calendarPolicy                                                string
	url, method, cancelURL, kafkaTopic, kafkaKey                            string
	payload, payloadFile                                                    string
	priority, backoff, misfire, overlap                                     string
	maxAttempts, maxCatchUp, maxConcurrency                                 int
	maxRuns                                                                 int64
	alsoCron, exclude                                                       listFlag
	initialDelay, maxDelay, attemptTimeout, misfireGrace, maxJitter         time.Duration
	callbackURL                                                             string
	labels, headers, secretHeaders                                          kvFlag
}

func (f *jobFlags) register(fs *flag.FlagSet) {
	f.fs = fs
	f.labels, f.headers, f.secretHeaders = kvFlag{}, kvFlag{}, kvFlag{}
	fs.StringVar(&f.file, "f", "", `job file, YAML or JSON ("-" reads standard input); flags override its fields`)
	fs.StringVar(&f.name, "name", "", "job name")
	fs.Var(f.labels, "label", "label key=value (repeatable)")
	fs.StringVar(&f.cron, "cron", "", `cron expression, e.g. "0 9 * * MON-FRI" or "@hourly"`)
	fs.StringVar(&f.once, "once", "", "fire once at this RFC 3339 instant")
	fs.StringVar(&f.every, "every", "", "fire at this fixed interval, e.g. 90s")
	fs.StringVar(&f.rrule, "rrule", "", `RFC 5545 recurrence rule, e.g. "FREQ=MONTHLY;BYDAY=2TU;BYHOUR=9;BYMINUTE=0;BYSECOND=0", optionally followed by EXDATE:... and RDATE:... (space- or newline-separated); DTSTART is --start, or the creation time`)
	fs.StringVar(&f.timezone, "timezone", "", "IANA zone the cron or rrule is evaluated in (default UTC)")
	fs.StringVar(&f.start, "start", "", "no slot before this RFC 3339 instant (anchors --every; DTSTART of --rrule)")
	fs.StringVar(&f.end, "end", "", "no slot after this RFC 3339 instant")
	fs.StringVar(&f.dstGap, "dst-gap", "", "spring-forward policy: SHIFT or SKIP")
	fs.StringVar(&f.dstRepeat, "dst-repeat", "", "fall-back policy: FIRST, LAST or BOTH")
	fs.StringVar(&f.calendar, "calendar", "", "business calendar (schedctl calendar create) whose holidays and weekend days the schedule skips or moves; \"\" (with update) removes it")
	fs.StringVar(&f.calendarPolicy, "calendar-policy", "", "with --calendar: SKIP (default), MOVE_NEXT or MOVE_PREVIOUS business day")
	f.alsoCron, f.exclude = nil, nil
	fs.Var(&f.alsoCron, "also-cron", "also fire at cron `EXPR`, in --timezone (repeatable; the union fires once per instant)")
	fs.Var(&f.exclude, "exclude", excludeUsage)
	fs.Int64Var(&f.maxRuns, "max-runs", 0, "the job completes after this many scheduled runs (catch-ups count, backfills and triggers do not; 0: no limit)")
	fs.StringVar(&f.url, "url", "", "HTTP target URL")
	fs.StringVar(&f.method, "method", "", "HTTP method (default POST)")
	fs.StringVar(&f.cancelURL, "cancel-url", "", "HTTP URL told (a signed POST) when an attempt already sent to --url is cancelled (default: --url itself, with Sundial-Event: cancelled)")
	fs.Var(f.headers, "header", "HTTP target header Name=value (repeatable); a value may reference secrets, e.g. 'Authorization=Bearer {{secret:api_token}}'")
	fs.Var(f.secretHeaders, "secret-header", "HTTP target header whose whole value is a secret the worker resolves: Name=SECRET sends {{secret:SECRET}} (repeatable)")
	fs.StringVar(&f.kafkaTopic, "kafka-topic", "", "Kafka target topic")
	fs.StringVar(&f.kafkaKey, "kafka-key", "", "Kafka target record key (default the job id)")
	fs.StringVar(&f.payload, "payload", "", "payload sent to the target, as text")
	fs.StringVar(&f.payloadFile, "payload-file", "", "read the payload from this file")
	fs.StringVar(&f.priority, "priority", "", "CRITICAL, HIGH, MEDIUM or LOW")
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "attempts including the first (default 1)")
	fs.StringVar(&f.backoff, "backoff", "", "FIXED, EXPONENTIAL or EXPONENTIAL_WITH_JITTER")
	fs.DurationVar(&f.initialDelay, "initial-delay", 0, "first retry delay (default 1s)")
	fs.DurationVar(&f.maxDelay, "max-delay", 0, "retry delay cap (default 1m)")
	fs.DurationVar(&f.attemptTimeout, "attempt-timeout", 0, "per-attempt timeout (default 30s)")
	fs.StringVar(&f.misfire, "misfire", "", "after an outage: SKIP, RUN_ONCE or RUN_ALL")
	fs.DurationVar(&f.misfireGrace, "misfire-grace", 0, "missed slots older than this are never replayed (default 1h)")
	fs.IntVar(&f.maxCatchUp, "max-catch-up", 0, "RUN_ALL cap (default 10)")
	fs.StringVar(&f.overlap, "overlap", "", "ALLOW, SKIP, BUFFER_ONE, BUFFER_ALL, CANCEL_OTHER or TERMINATE_OTHER: what a slot due while the job runs does")
	fs.IntVar(&f.maxConcurrency, "max-concurrency", 0, "executions of the job that may run at once (default 1; above 1 needs an --overlap other than ALLOW, which applies to the one beyond)")
	fs.DurationVar(&f.maxJitter, "max-jitter", 0, "deterministic per-slot jitter bound, 0 to 60s")
	fs.StringVar(&f.callbackURL, "callback-url", "", "URL notified on success, final failure and DLQ entry")
}

// set reports which flags the command line gave.
func (f *jobFlags) set() map[string]bool {
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	return given
}

// flagPaths maps each job flag to the field path it sets.
var flagPaths = map[string]string{
	"name": "name", "label": "labels",
	"cron": "schedule.cron", "once": "schedule.once", "every": "schedule.interval", "rrule": "schedule.rrule",
	"timezone": "schedule.timezone", "start": "schedule.start_time", "end": "schedule.end_time",
	"dst-gap": "schedule.dst_gap", "dst-repeat": "schedule.dst_repeat",
	"calendar": "schedule.calendar", "calendar-policy": "schedule.calendar_policy",
	"also-cron": "schedule.additional_schedules", "exclude": "schedule.exclusions", "max-runs": "max_runs",
	"url": "target.http.url", "method": "target.http.method", "cancel-url": "target.http.cancel_url", "header": "target.http.headers", "secret-header": "target.http.headers",
	"kafka-topic": "target.kafka.topic", "kafka-key": "target.kafka.key",
	"payload": "payload", "payload-file": "payload",
	"priority": "priority", "max-attempts": "retry.max_attempts", "backoff": "retry.backoff",
	"initial-delay": "retry.initial_delay", "max-delay": "retry.max_delay",
	"attempt-timeout": "attempt_timeout",
	"misfire":         "misfire.action", "misfire-grace": "misfire.grace", "max-catch-up": "misfire.max_catch_up",
	"overlap": "overlap", "max-jitter": "max_jitter", "callback-url": "callback_url", "max-concurrency": "max_concurrency",
}

// jobFlagValues are the words of the job flags that take an enum, for
// completion: the proto's names without their prefix, as apply reads them.
func jobFlagValues() map[string][]string {
	upper := func(s string) string { return s }
	return map[string][]string{
		"dst-gap":         enumWords(sundialv1.DstGapPolicy_value, "DST_GAP_POLICY_", upper),
		"dst-repeat":      enumWords(sundialv1.DstRepeatPolicy_value, "DST_REPEAT_POLICY_", upper),
		"calendar-policy": calendarPolicyWords(),
		"priority":        enumWords(sundialv1.Priority_value, "PRIORITY_", upper),
		"backoff":         enumWords(sundialv1.Backoff_value, "BACKOFF_", upper),
		"misfire":         enumWords(sundialv1.MisfireAction_value, "MISFIRE_ACTION_", upper),
		"overlap":         enumWords(sundialv1.OverlapPolicy_value, "OVERLAP_POLICY_", upper),
	}
}

// enumWords lists a proto enum's values in number order, without prefix,
// spelled by spell, leaving out the UNSPECIFIED zero value.
func enumWords(values map[string]int32, prefix string, spell func(string) string) []string {
	names := make([]string, 0, len(values))
	for name, n := range values {
		if n != 0 {
			names = append(names, name)
		}
	}
	sort.Slice(names, func(i, j int) bool { return values[names[i]] < values[names[j]] })
	for i, name := range names {
		names[i] = spell(strings.TrimPrefix(name, prefix))
	}
	return names
}

// build returns the job the file and flags describe, and the field paths
// the flags set (for an update's mask). in is standard input, for -f -.
func (f *jobFlags) build(in io.Reader) (*sundialv1.Job, []string, error) {
	job := &sundialv1.Job{}
	if f.file != "" {
		var (
			b   []byte
			err error
		)
		if f.file == "-" {
			b, err = io.ReadAll(in)
		} else {
			b, err = os.ReadFile(f.file)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("job file: %w", err)
		}
		if job, err = parseJobFile(b); err != nil {
			return nil, nil, fmt.Errorf("job file %s: %w", f.file, err)
		}
	}
	given := f.set()
	var paths []string
	for name := range given {
		if p, ok := flagPaths[name]; ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	if err := f.apply(job, given); err != nil {
		return nil, nil, err
	}
	return job, dedupe(paths), nil
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func (f *jobFlags) apply(job *sundialv1.Job, given map[string]bool) error {
	sched := func() *sundialv1.Schedule {
		if job.Schedule == nil {
			job.Schedule = &sundialv1.Schedule{}
		}
		return job.Schedule
	}
	httpT := func() *sundialv1.HttpTarget {
		if job.GetTarget().GetHttp() == nil {
			job.Target = &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{}}}
		}
		return job.Target.GetHttp()
	}
	kafkaT := func() *sundialv1.KafkaTarget {
		if job.GetTarget().GetKafka() == nil {
			job.Target = &sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{}}}
		}
		return job.Target.GetKafka()
	}
	retry := func() *sundialv1.RetryPolicy {
		if job.Retry == nil {
			job.Retry = &sundialv1.RetryPolicy{}
		}
		return job.Retry
	}
	misfire := func() *sundialv1.MisfirePolicy {
		if job.Misfire == nil {
			job.Misfire = &sundialv1.MisfirePolicy{}
		}
		return job.Misfire
	}
	n := 0
	for _, k := range []string{"cron", "once", "every", "rrule"} {
		if given[k] {
			n++
		}
	}
	if n > 1 {
		return usagef("give only one of --cron, --once, --every and --rrule")
	}
	if given["url"] && given["kafka-topic"] {
		return usagef("give only one of --url and --kafka-topic")
	}
	if given["payload"] && given["payload-file"] {
		return usagef("give only one of --payload and --payload-file")
	}
	var err error
	ts := func(flagName, v string) *timestamppb.Timestamp {
		t, perr := time.Parse(time.RFC3339Nano, v)
		if perr != nil && err == nil {
			err = usagef("--%s: want an RFC 3339 instant such as 2026-05-01T09:00:00Z, got %q", flagName, v)
		}
		return timestamppb.New(t)
	}
	enum := func(flagName, prefix, v string, names map[string]int32) int32 {
		x, ok := names[prefix+strings.ToUpper(v)]
		if !ok && err == nil {
			err = usagef("--%s: unknown value %q", flagName, v)
		}
		return x
	}
	if given["name"] {
		job.Name = f.name
	}
	if given["label"] {
		job.Labels = f.labels
	}
	if given["cron"] {
		sched().Spec = &sundialv1.Schedule_Cron{Cron: f.cron}
	}
	if given["once"] {
		sched().Spec = &sundialv1.Schedule_Once{Once: ts("once", f.once)}
	}
	if given["every"] {
		d, perr := time.ParseDuration(f.every)
		if perr != nil {
			return usagef("--every: want a duration such as 90s or 5m, got %q", f.every)
		}
		sched().Spec = &sundialv1.Schedule_Interval{Interval: durationpb.New(d)}
	}
	if given["rrule"] {
		sched().Spec = &sundialv1.Schedule_Rrule{Rrule: f.rrule}
	}
	if given["timezone"] {
		sched().Timezone = f.timezone
	}
	if given["start"] {
		sched().StartTime = ts("start", f.start)
	}
	if given["end"] {
		sched().EndTime = ts("end", f.end)
	}
	if given["dst-gap"] {
		sched().DstGap = sundialv1.DstGapPolicy(enum("dst-gap", "DST_GAP_POLICY_", f.dstGap, sundialv1.DstGapPolicy_value))
	}
	if given["dst-repeat"] {
		sched().DstRepeat = sundialv1.DstRepeatPolicy(enum("dst-repeat", "DST_REPEAT_POLICY_", f.dstRepeat, sundialv1.DstRepeatPolicy_value))
	}
	if given["calendar"] {
		sched().Calendar = f.calendar
	}
	if given["calendar-policy"] {
		sched().CalendarPolicy = sundialv1.CalendarPolicy(enum("calendar-policy", "CALENDAR_POLICY_", f.calendarPolicy, sundialv1.CalendarPolicy_value))
	}
	if given["also-cron"] {
		sched().AdditionalSchedules = nil
		for _, expr := range f.alsoCron {
			sched().AdditionalSchedules = append(sched().AdditionalSchedules, &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: expr}})
		}
	}
	if given["exclude"] {
		xs, xerr := exclusionsOf(f.exclude)
		if xerr != nil {
			return xerr
		}
		sched().Exclusions = xs
	}
	if given["max-runs"] {
		job.MaxRuns = f.maxRuns
	}
	if given["url"] {
		httpT().Url = f.url
	}
	if given["method"] {
		httpT().Method = f.method
	}
	if given["cancel-url"] {
		httpT().CancelUrl = f.cancelURL
	}
	if given["header"] || given["secret-header"] {
		h := map[string]string{}
		for k, v := range f.headers {
			h[k] = v
		}
		for k, name := range f.secretHeaders {
			if _, dup := f.headers[k]; dup {
				return usagef("header %q is given by both --header and --secret-header", k)
			}
			h[k] = "{{secret:" + name + "}}"
		}
		httpT().Headers = h
	}
	if given["kafka-topic"] {
		kafkaT().Topic = f.kafkaTopic
	}
	if given["kafka-key"] {
		kafkaT().Key = f.kafkaKey
	}
	if given["payload"] {
		job.Payload = []byte(f.payload)
	}
	if given["payload-file"] {
		b, rerr := os.ReadFile(f.payloadFile)
		if rerr != nil {
			return fmt.Errorf("--payload-file: %w", rerr)
		}
		job.Payload = b
	}
	if given["priority"] {
		job.Priority = sundialv1.Priority(enum("priority", "PRIORITY_", f.priority, sundialv1.Priority_value))
	}
	if given["max-attempts"] {
		retry().MaxAttempts = int32(f.maxAttempts)
	}
	if given["backoff"] {
		retry().Backoff = sundialv1.Backoff(enum("backoff", "BACKOFF_", f.backoff, sundialv1.Backoff_value))
	}
	if given["initial-delay"] {
		retry().InitialDelay = durationpb.New(f.initialDelay)
	}
	if given["max-delay"] {
		retry().MaxDelay = durationpb.New(f.maxDelay)
	}
	if given["attempt-timeout"] {
		job.AttemptTimeout = durationpb.New(f.attemptTimeout)
	}
	if given["misfire"] {
		misfire().Action = sundialv1.MisfireAction(enum("misfire", "MISFIRE_ACTION_", f.misfire, sundialv1.MisfireAction_value))
	}
	if given["misfire-grace"] {
		misfire().Grace = durationpb.New(f.misfireGrace)
	}
	if given["max-catch-up"] {
		misfire().MaxCatchUp = int32(f.maxCatchUp)
	}
	if given["overlap"] {
		job.Overlap = sundialv1.OverlapPolicy(enum("overlap", "OVERLAP_POLICY_", f.overlap, sundialv1.OverlapPolicy_value))
	}
	if given["max-concurrency"] {
		job.MaxConcurrency = int32(f.maxConcurrency)
	}
	if given["max-jitter"] {
		job.MaxJitter = durationpb.New(f.maxJitter)
	}
	if given["callback-url"] {
		job.CallbackUrl = f.callbackURL
	}
	return err
}

// enumPrefixes lets job files say `priority: HIGH` rather than the full
// `PRIORITY_HIGH`; the full names work too.
var enumPrefixes = map[string]string{
	"priority":        "PRIORITY_",
	"overlap":         "OVERLAP_POLICY_",
	"dst_gap":         "DST_GAP_POLICY_",
	"dstGap":          "DST_GAP_POLICY_",
	"dst_repeat":      "DST_REPEAT_POLICY_",
	"dstRepeat":       "DST_REPEAT_POLICY_",
	"calendar_policy": "CALENDAR_POLICY_",
	"calendarPolicy":  "CALENDAR_POLICY_",
	"backoff":         "BACKOFF_",
	"action":          "MISFIRE_ACTION_",
}

// parseJobFile reads a job in the protobuf JSON mapping, written as JSON or
// YAML: durations as "30s", instants as RFC 3339, snake_case or camelCase
// field names. Two conveniences on top: enum values may drop their prefix
// (priority: HIGH), and a payload written as a YAML/JSON object or list is
// sent as its JSON encoding (a string payload is base64, as in the JSON
// mapping, so `schedctl get -o json` output reads back unchanged).
func parseJobFile(b []byte) (*sundialv1.Job, error) {
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a mapping of job fields at the top level")
	}
	// `schedctl get -o json` prints {"job": {...}}-less jobs; accept a
	// CreateJobRequest-shaped file too.
	if inner, ok := m["job"].(map[string]any); ok && len(m) == 1 {
		m = inner
	}
	if p, ok := m["payload"]; ok {
		switch p.(type) {
		case map[string]any, []any:
			enc, err := json.Marshal(p)
			if err != nil {
				return nil, fmt.Errorf("payload: %w", err)
			}
			m["payload"] = enc // []byte marshals as base64, as protojson wants
		}
	}
	expandEnums(m)
	js, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	job := &sundialv1.Job{}
	if err := protojson.Unmarshal(js, job); err != nil {
		return nil, err
	}
	return job, nil
}

func expandEnums(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if s, ok := val.(string); ok {
				if prefix, ok := enumPrefixes[k]; ok && !strings.HasPrefix(strings.ToUpper(s), prefix) {
					x[k] = prefix + strings.ToUpper(s)
				}
				continue
			}
			if k == "labels" || k == "headers" {
				continue
			}
			expandEnums(val)
		}
	case []any:
		for _, e := range x {
			expandEnums(e)
		}
	}
}
