package jobspec

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The fuzz targets of this package stand in for a hostile client: every
// job the api accepts went through Validate, so what Validate lets through
// is what the prefetcher, the relay and the worker must cope with.

// fuzzJobs are the seeds of FuzzValidate, encoded: valid jobs of every
// schedule and target kind, and a few that are wrong in one field.
func fuzzJobs() []*sundialv1.Job {
	full := goodJob()
	full.Labels = map[string]string{"team": "billing", "app.kubernetes.io/name": "x"}
	full.Schedule.Timezone = "Australia/Lord_Howe"
	full.Schedule.StartTime, full.Schedule.EndTime = ts("2030-01-01T00:00:00Z"), ts("2031-01-01T00:00:00Z")
	full.Payload = []byte(`{"report":"nightly"}`)
	full.Priority = sundialv1.Priority_PRIORITY_HIGH
	full.Retry = &sundialv1.RetryPolicy{MaxAttempts: 5, Backoff: sundialv1.Backoff_BACKOFF_EXPONENTIAL_WITH_JITTER, InitialDelay: dur(time.Second), MaxDelay: dur(time.Hour)}
	full.AttemptTimeout = dur(10 * time.Second)
	full.Misfire = &sundialv1.MisfirePolicy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: dur(time.Hour), MaxCatchUp: 3}
	full.Overlap = sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP
	full.MaxJitter = dur(30 * time.Second)
	full.CallbackUrl = "https://hooks.example/done"
	httpTarget(full).Method = "put"
	httpTarget(full).Headers = map[string]string{"Authorization": "Bearer {{secret:billing-token}}", "Content-Type": "application/json"}

	once := goodJob()
	once.Schedule.Spec = &sundialv1.Schedule_Once{Once: ts("2030-01-01T00:00:00Z")}
	every := goodJob()
	every.Schedule.Spec = &sundialv1.Schedule_Interval{Interval: dur(90 * time.Second)}
	kafka := goodJob()
	kafka.Target.Kind = &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "billing.events_v2", Key: "k"}}
	quartz := goodJob()
	quartz.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "0 0 12 LW * ?"}
	rule := goodJob()
	rule.Schedule.Spec = &sundialv1.Schedule_Rrule{Rrule: "FREQ=MONTHLY;BYDAY=2TU;BYHOUR=9;BYMINUTE=0;BYSECOND=0"}
	rule.Schedule.Timezone = "Asia/Kolkata"
	leap := goodJob()
	leap.Schedule.Spec = &sundialv1.Schedule_Rrule{Rrule: "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;INTERVAL=4"}
	badCron := goodJob()
	badCron.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "61 * * * *"}
	badHeader := goodJob()
	httpTarget(badHeader).Headers = map[string]string{"Sundial-Fence-Token": "1", "X-Ref": "{{secret:}}"}
	badURL := goodJob()
	httpTarget(badURL).Url = "http://user:pass@example.com/"
	union := goodJob()
	union.MaxRuns = 12
	union.Schedule.AdditionalSchedules = []*sundialv1.Schedule{
		{Spec: &sundialv1.Schedule_Cron{Cron: "30 2 * * SAT"}},
		{Spec: &sundialv1.Schedule_Rrule{Rrule: "FREQ=MONTHLY;BYDAY=2TU;BYHOUR=9;BYMINUTE=0;BYSECOND=0"}, Timezone: "Asia/Tokyo"},
	}
	union.Schedule.Exclusions = []*sundialv1.Exclusion{
		{Start: "22:00", End: "06:00", Weekdays: []sundialv1.Weekday{sundialv1.Weekday_WEEKDAY_FRIDAY}, Note: "freeze"},
		{StartDate: "2026-12-24", EndDate: "2026-12-26"},
	}
	return []*sundialv1.Job{goodJob(), full, once, every, kafka, quartz, rule, leap, union, badCron, badHeader, badURL, {}}
}

// FuzzValidate decodes any bytes as a job, as the api's gRPC server does
// with a request, and checks what Validate makes of it:
//
//   - it never panics;
//   - a refusal is an *Error whose every violation names a field of Job
//     (the first element of its path) and says what is wrong;
//   - an accepted job stays accepted once normalized, normalizing twice
//     changes nothing, its schedule builds, an HTTP target and a callback
//     make a request net/http will send (header names and values
//     included), and its firing envelope round-trips through the encoding
//     the outbox and Kafka carry.
func FuzzValidate(f *testing.F) {
	for _, j := range fuzzJobs() {
		b, err := proto.Marshal(j)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	fields := (&sundialv1.Job{}).ProtoReflect().Descriptor().Fields()
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, b []byte) {
		job := &sundialv1.Job{}
		if proto.Unmarshal(b, job) != nil {
			return
		}
		err := Validate(job)
		if err != nil {
			var jerr *Error
			if !errors.As(err, &jerr) || len(jerr.Violations) == 0 {
				t.Fatalf("Validate returned %T %v, want an *Error with violations", err, err)
			}
			for _, v := range jerr.Violations {
				top := v.Field
				if i := strings.IndexAny(top, ".["); i >= 0 {
					top = top[:i]
				}
				if fields.ByName(protoreflect.Name(top)) == nil || v.Description == "" {
					t.Fatalf("violation %q: %q does not name a field of Job, or says nothing", v.Field, v.Description)
				}
			}
			return
		}
		norm := proto.Clone(job).(*sundialv1.Job)
		Normalize(norm)
		if err := Validate(norm); err != nil {
			t.Fatalf("accepted job refused once normalized: %v", err)
		}
		again := proto.Clone(norm).(*sundialv1.Job)
		Normalize(again)
		if !proto.Equal(norm, again) {
			t.Fatal("Normalize is not idempotent")
		}
		// A job's schedule is built once it is stored, with the id the api
		// gave it, which a cron's H hashes; Validate checks H with a
		// stand-in for a job not created yet.
		stored := norm
		if stored.GetId() == "" {
			stored = proto.Clone(norm).(*sundialv1.Job)
			stored.Id = "0192d7a0-0000-7000-8000-0000000000aa"
		}
		if _, err := Schedule(stored, created); err != nil && !neverFiresFromCreation(norm.GetSchedule(), created) {
			t.Fatalf("accepted job's schedule does not build: %v", err)
		}
		if h := norm.GetTarget().GetHttp(); h != nil {
			sendable(t, h.GetMethod(), h.GetUrl(), h.GetHeaders())
		}
		if u := norm.GetCallbackUrl(); u != "" {
			sendable(t, http.MethodPost, u, nil)
		}
		env := firing.New(norm, firing.Attempt{Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE, ExecutionID: "0192d7a0-0000-7000-8000-000000000001",
			Scheduled: created, Fire: created.Add(time.Second), Number: 1})
		eb, err := proto.Marshal(env)
		if err != nil {
			t.Fatalf("envelope does not encode: %v", err)
		}
		back := &sundialv1.Firing{}
		if err := proto.Unmarshal(eb, back); err != nil || !proto.Equal(env, back) {
			t.Fatalf("envelope does not round-trip: %v", err)
		}
	})
}

// neverFiresFromCreation reports whether s is a recurrence rule without
// start_time that never fires counted from created: Validate checks such a
// rule from the epoch and leaves this to the create, which knows the
// creation time and refuses it.
func neverFiresFromCreation(s *sundialv1.Schedule, created time.Time) bool {
	for _, a := range s.GetAdditionalSchedules() {
		if neverFiresFromCreation(inheritZone(a, s), created) {
			return true
		}
	}
	r, ok := s.GetSpec().(*sundialv1.Schedule_Rrule)
	if !ok || s.GetStartTime() != nil {
		return false
	}
	loc, err := location(s.GetTimezone())
	if err != nil {
		return false
	}
	opts := schedule.Options{Location: loc, Gap: gapPolicy(s.GetDstGap()), Repeat: repeatPolicy(s.GetDstRepeat())}
	if ts := s.GetEndTime(); ts != nil {
		opts.End = ts.AsTime()
	}
	_, err = schedule.ParseRRule(r.Rrule, anchorFor(s, created), opts)
	return errors.Is(err, schedule.ErrNeverFires)
}

// sendable fails t unless net/http builds the request and would write
// every header: a job the api accepted but the worker cannot send fails at
// its first firing instead of at its creation.
func sendable(t *testing.T, method, url string, headers map[string]string) {
	t.Helper()
	if _, err := http.NewRequest(method, url, nil); err != nil {
		t.Fatalf("accepted %s %q, which net/http refuses: %v", method, url, err)
	}
	for k, v := range headers {
		if !httpguts.ValidHeaderFieldName(k) {
			t.Fatalf("accepted header name %q, which net/http refuses", k)
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			t.Fatalf("accepted a value of header %q that net/http refuses", k)
		}
	}
}

// FuzzHeader drives one header of an HTTP target, name and value, through
// Validate: a header is either accepted, and then net/http sends it and
// its secret references parse, or refused with a violation naming that
// header — and the description never repeats the value, which may be a
// credential.
func FuzzHeader(f *testing.F) {
	for _, h := range [][2]string{
		{"Authorization", "Bearer {{secret:billing-token}}"},
		{"X-Two", "{{secret:a}}-{{secret:b.c_d}}"},
		{"X-Tab", "a\tb"},
		{"X-Bad", "line\r\nInjected: yes"},
		{"X-Open", "{{secret:unterminated"},
		{"X-Brace", "{{not-a-ref}}"},
		{"Idempotency-Key", "mine"},
		{"sundial-signature", "forged"},
		{"Bad Name", "v"},
		{"X-Ctl", "a\x01b"},
		{"X-Del", "a\x7fb"},
		{"X-Utf8", "café"},
	} {
		f.Add(h[0], h[1])
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		job := goodJob()
		httpTarget(job).Headers = map[string]string{name: value}
		err := Validate(job)
		if err == nil {
			sendable(t, http.MethodPost, httpTarget(job).GetUrl(), httpTarget(job).GetHeaders())
			if _, err := SecretReferences(value); err != nil {
				t.Fatalf("accepted a value whose references do not parse: %v", err)
			}
			return
		}
		var jerr *Error
		if !errors.As(err, &jerr) {
			t.Fatalf("Validate returned %T %v", err, err)
		}
		for _, v := range jerr.Violations {
			if !strings.HasPrefix(v.Field, "target.http.headers") {
				t.Fatalf("a header made %q fail: %s", v.Field, v.Description)
			}
			if len(value) >= 8 && strings.Contains(variablePart(v.Description), value) {
				t.Fatalf("the description of %s quotes the header's value", v.Field)
			}
		}
	})
}

// variablePart is a header violation's description without its fixed
// phrases, which a fuzzed value may happen to spell ("{{secret").
func variablePart(desc string) string {
	for _, fixed := range []string{secretNameHint, ErrMalformedSecretRef.Error(), "no closing }}", "is set by Sundial and cannot be overridden",
		"is not a valid HTTP header name", "value must not contain CR, LF, NUL or other control characters (tab is allowed)", "value has a"} {
		desc = strings.ReplaceAll(desc, fixed, "")
	}
	return desc
}

// FuzzSecretReferences checks the reference parser the api validates with
// and the worker expands with: expanding every reference to itself gives
// the value back, expanding to values replaces exactly the references
// SecretReferences lists, and a value without "{{" is never touched.
func FuzzSecretReferences(f *testing.F) {
	for _, s := range []string{"Bearer {{secret:tok}}", "{{secret:a}}{{secret:b}}", "plain", "{{secret:}}", "{{secret:a}", "{{{secret:a}}", "x{{secret:a.b-c_d}}y", "}}{{"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		names, err := SecretReferences(v)
		if err != nil {
			if !errors.Is(err, ErrMalformedSecretRef) {
				t.Fatalf("SecretReferences: %v does not wrap ErrMalformedSecretRef", err)
			}
			if _, xerr := ExpandSecrets(v, func(string) (string, bool) { return "", true }); !errors.Is(xerr, ErrMalformedSecretRef) {
				t.Fatalf("ExpandSecrets accepted what SecretReferences refused: %v", xerr)
			}
			return
		}
		if !strings.Contains(v, "{{") && len(names) > 0 {
			t.Fatalf("references %v found in a value without {{", names)
		}
		same, err := ExpandSecrets(v, func(n string) (string, bool) { return "{{secret:" + n + "}}", true })
		if err != nil || same != v {
			t.Fatalf("expanding each reference to itself gave %q, %v", same, err)
		}
		var asked []string
		out, err := ExpandSecrets(v, func(n string) (string, bool) { asked = append(asked, n); return "", true })
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(asked, "\x00") != strings.Join(names, "\x00") {
			t.Fatalf("expansion looked up %q, SecretReferences lists %q", asked, names)
		}
		if len(names) > 0 && len(out) >= len(v) {
			t.Fatalf("removing %d references left %d of %d bytes", len(names), len(out), len(v))
		}
	})
}
