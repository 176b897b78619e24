package jobspec

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// goodJob is a minimal valid job; cases mutate a copy.
func goodJob() *sundialv1.Job {
	return &sundialv1.Job{
		Name:     "nightly report",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 3 * * *"}},
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{
			Url: "https://reports.internal.example/run",
		}}},
	}
}

func ts(s string) *timestamppb.Timestamp {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return timestamppb.New(t)
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func httpTarget(j *sundialv1.Job) *sundialv1.HttpTarget { return j.GetTarget().GetHttp() }

func TestValidateAcceptsGoodJobs(t *testing.T) {
	cases := map[string]func(j *sundialv1.Job){
		"minimal":          func(j *sundialv1.Job) {},
		"six-field cron":   func(j *sundialv1.Job) { j.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "*/5 * * * * *"} },
		"macro":            func(j *sundialv1.Job) { j.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "@daily"} },
		"quartz":           func(j *sundialv1.Job) { j.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "0 0 12 LW * ?"} },
		"cron with spaces": func(j *sundialv1.Job) { j.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "  0 3 * * MON-FRI "} },
		"timezone":         func(j *sundialv1.Job) { j.Schedule.Timezone = "Australia/Lord_Howe" },
		"utc explicit":     func(j *sundialv1.Job) { j.Schedule.Timezone = "UTC" },
		"dst policies":     func(j *sundialv1.Job) { j.Schedule.DstGap, j.Schedule.DstRepeat = 2, 3 },
		"once":             func(j *sundialv1.Job) { j.Schedule.Spec = &sundialv1.Schedule_Once{Once: ts("2030-01-01T00:00:00Z")} },
		"interval": func(j *sundialv1.Job) {
			j.Schedule.Spec = &sundialv1.Schedule_Interval{Interval: dur(90 * time.Second)}
		},
		"interval 1s": func(j *sundialv1.Job) { j.Schedule.Spec = &sundialv1.Schedule_Interval{Interval: dur(time.Second)} },
		"bounds": func(j *sundialv1.Job) {
			j.Schedule.StartTime, j.Schedule.EndTime = ts("2030-01-01T00:00:00Z"), ts("2031-01-01T00:00:00Z")
		},
		"start only":        func(j *sundialv1.Job) { j.Schedule.StartTime = ts("2030-01-01T00:00:00Z") },
		"http method lower": func(j *sundialv1.Job) { httpTarget(j).Method = "put" },
		"http plain":        func(j *sundialv1.Job) { httpTarget(j).Url = "http://127.0.0.1:8080/hook?x=1" },
		"http ipv6":         func(j *sundialv1.Job) { httpTarget(j).Url = "http://[::1]:8080/hook" },
		"headers": func(j *sundialv1.Job) {
			httpTarget(j).Headers = map[string]string{"X-Token": "abc", "Content-Type": "application/json"}
		},
		"kafka": func(j *sundialv1.Job) {
			j.Target.Kind = &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "billing.events_v2", Key: "k"}}
		},
		"payload":  func(j *sundialv1.Job) { j.Payload = make([]byte, MaxPayloadBytes) },
		"priority": func(j *sundialv1.Job) { j.Priority = sundialv1.Priority_PRIORITY_CRITICAL },
		"labels": func(j *sundialv1.Job) {
			j.Labels = map[string]string{"team": "billing", "app.kubernetes.io/name": "x", "empty": ""}
		},
		"retry": func(j *sundialv1.Job) {
			j.Retry = &sundialv1.RetryPolicy{MaxAttempts: 5, Backoff: sundialv1.Backoff_BACKOFF_FIXED, InitialDelay: dur(0), MaxDelay: dur(time.Hour)}
		},
		"retry long initial with max": func(j *sundialv1.Job) {
			j.Retry = &sundialv1.RetryPolicy{InitialDelay: dur(10 * time.Minute), MaxDelay: dur(time.Hour)}
		},
		"attempt timeout": func(j *sundialv1.Job) { j.AttemptTimeout = dur(time.Hour) },
		"misfire": func(j *sundialv1.Job) {
			j.Misfire = &sundialv1.MisfirePolicy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: dur(0), MaxCatchUp: MaxCatchUp}
		},
		"overlap":  func(j *sundialv1.Job) { j.Overlap = sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE },
		"jitter 0": func(j *sundialv1.Job) { j.MaxJitter = dur(0) },
		"buffer all, 3 at once": func(j *sundialv1.Job) {
			j.Overlap, j.MaxConcurrency = sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ALL, 3
		},
		"terminate other": func(j *sundialv1.Job) { j.Overlap = sundialv1.OverlapPolicy_OVERLAP_POLICY_TERMINATE_OTHER },
		"cancel other, 100": func(j *sundialv1.Job) {
			j.Overlap, j.MaxConcurrency = sundialv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER, 100
		},
		"jitter 60s": func(j *sundialv1.Job) { j.MaxJitter = dur(60 * time.Second) },
		"callback":   func(j *sundialv1.Job) { j.CallbackUrl = "https://hooks.example/done" },
		"output-only ignored": func(j *sundialv1.Job) {
			j.Id, j.Tenant, j.Version, j.Status = "not-a-uuid", "someone", -4, sundialv1.JobStatus(99)
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			j := goodJob()
			mutate(j)
			if err := Validate(j); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			// Normalizing never makes a valid job invalid.
			Normalize(j)
			if err := Validate(j); err != nil {
				t.Fatalf("Validate after Normalize: %v", err)
			}
			if _, err := Schedule(j, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
				t.Fatalf("Schedule: %v", err)
			}
		})
	}
}

func TestValidateNamesTheField(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(j *sundialv1.Job)
		field  string
		desc   string // substring of the description
	}{
		{"no schedule", func(j *sundialv1.Job) { j.Schedule = nil }, "schedule", "is required"},
		{"empty schedule", func(j *sundialv1.Job) { j.Schedule.Spec = nil }, "schedule", "one of cron, once, interval or rrule"},
		{"empty cron", func(j *sundialv1.Job) { j.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "  "} }, "schedule.cron", "must not be empty"},
		{"cron day out of range", func(j *sundialv1.Job) { j.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "0 0 32 * *"} }, "schedule.cron", "32"},
		{"cron garbage", func(j *sundialv1.Job) { j.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "every tuesday"} }, "schedule.cron", ""},
		{"cron too few fields", func(j *sundialv1.Job) { j.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "* * *"} }, "schedule.cron", ""},
		{"bad timezone", func(j *sundialv1.Job) { j.Schedule.Timezone = "Mars/Olympus" }, "schedule.timezone", "IANA"},
		{"local timezone", func(j *sundialv1.Job) { j.Schedule.Timezone = "Local" }, "schedule.timezone", "IANA zone"},
		{"dst gap", func(j *sundialv1.Job) { j.Schedule.DstGap = 7 }, "schedule.dst_gap", "unknown value 7"},
		{"dst repeat", func(j *sundialv1.Job) { j.Schedule.DstRepeat = -1 }, "schedule.dst_repeat", "unknown value"},
		{"end before start", func(j *sundialv1.Job) {
			j.Schedule.StartTime, j.Schedule.EndTime = ts("2030-01-02T00:00:00Z"), ts("2030-01-01T00:00:00Z")
		}, "schedule.end_time", "after start_time"},
		{"bad start", func(j *sundialv1.Job) {
			j.Schedule.StartTime = &timestamppb.Timestamp{Seconds: 1, Nanos: -1}
		}, "schedule.start_time", "valid timestamp"},
		{"bad once", func(j *sundialv1.Job) {
			j.Schedule.Spec = &sundialv1.Schedule_Once{Once: &timestamppb.Timestamp{Seconds: 1 << 62}}
		}, "schedule.once", "valid timestamp"},
		{"interval short", func(j *sundialv1.Job) {
			j.Schedule.Spec = &sundialv1.Schedule_Interval{Interval: dur(500 * time.Millisecond)}
		}, "schedule.interval", "at least 1s"},
		{"interval fractional", func(j *sundialv1.Job) {
			j.Schedule.Spec = &sundialv1.Schedule_Interval{Interval: dur(1500 * time.Millisecond)}
		}, "schedule.interval", "whole number of seconds"},
		{"interval negative", func(j *sundialv1.Job) {
			j.Schedule.Spec = &sundialv1.Schedule_Interval{Interval: dur(-time.Minute)}
		}, "schedule.interval", "at least 1s"},
		{"no target", func(j *sundialv1.Job) { j.Target = nil }, "target", "set http or kafka"},
		{"http nil", func(j *sundialv1.Job) { j.Target.Kind = &sundialv1.Target_Http{} }, "target.http", "is required"},
		{"relative url", func(j *sundialv1.Job) { httpTarget(j).Url = "/run" }, "target.http.url", "must be an absolute http or https URL"},
		{"ftp url", func(j *sundialv1.Job) { httpTarget(j).Url = "ftp://x.example/run" }, "target.http.url", "absolute http or https"},
		{"empty url", func(j *sundialv1.Job) { httpTarget(j).Url = "" }, "target.http.url", "absolute http or https"},
		{"url no host", func(j *sundialv1.Job) { httpTarget(j).Url = "https:///x" }, "target.http.url", "absolute http or https"},
		{"url credentials", func(j *sundialv1.Job) { httpTarget(j).Url = "https://u:p@x.example/" }, "target.http.url", "credentials"},
		{"url long", func(j *sundialv1.Job) { httpTarget(j).Url = "https://x.example/" + strings.Repeat("a", MaxURLLen) }, "target.http.url", "at most"},
		{"method", func(j *sundialv1.Job) { httpTarget(j).Method = "TRACE" }, "target.http.method", "must be one of"},
		{"header name", func(j *sundialv1.Job) { httpTarget(j).Headers = map[string]string{"Bad Header": "x"} }, `target.http.headers["Bad Header"]`, "not a valid HTTP header name"},
		{"header reserved", func(j *sundialv1.Job) { httpTarget(j).Headers = map[string]string{"idempotency-key": "x"} }, `target.http.headers["idempotency-key"]`, "set by Sundial"},
		{"header sundial", func(j *sundialv1.Job) { httpTarget(j).Headers = map[string]string{"Sundial-Fence-Token": "1"} }, `target.http.headers["Sundial-Fence-Token"]`, "set by Sundial"},
		{"header value", func(j *sundialv1.Job) { httpTarget(j).Headers = map[string]string{"X-A": "a\r\nX-B: b"} }, `target.http.headers["X-A"]`, "CR, LF"},
		{"headers big", func(j *sundialv1.Job) {
			httpTarget(j).Headers = map[string]string{"X-A": strings.Repeat("a", MaxHeaderBytes)}
		}, "target.http.headers", "bytes together"},
		{"kafka nil", func(j *sundialv1.Job) { j.Target.Kind = &sundialv1.Target_Kafka{} }, "target.kafka", "is required"},
		{"kafka no topic", func(j *sundialv1.Job) {
			j.Target.Kind = &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{}}
		}, "target.kafka.topic", "is required"},
		{"kafka bad topic", func(j *sundialv1.Job) {
			j.Target.Kind = &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "a topic"}}
		}, "target.kafka.topic", "only letters"},
		{"kafka internal topic", func(j *sundialv1.Job) {
			j.Target.Kind = &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "__consumer_offsets"}}
		}, "target.kafka.topic", "internal"},
		{"kafka key", func(j *sundialv1.Job) {
			j.Target.Kind = &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "t", Key: strings.Repeat("k", MaxKafkaKeyLen+1)}}
		}, "target.kafka.key", "at most"},
		{"payload", func(j *sundialv1.Job) { j.Payload = make([]byte, MaxPayloadBytes+1) }, "payload", "at most"},
		{"priority", func(j *sundialv1.Job) { j.Priority = 9 }, "priority", "unknown value 9"},
		{"name long", func(j *sundialv1.Job) { j.Name = strings.Repeat("n", MaxNameLen+1) }, "name", "at most"},
		{"name control", func(j *sundialv1.Job) { j.Name = "a\nb" }, "name", "control"},
		{"name utf8", func(j *sundialv1.Job) { j.Name = "\xff" }, "name", "UTF-8"},
		{"label key", func(j *sundialv1.Job) { j.Labels = map[string]string{"bad key": "v"} }, `labels["bad key"]`, "key must be"},
		{"label empty key", func(j *sundialv1.Job) { j.Labels = map[string]string{"": "v"} }, `labels[""]`, "key must be"},
		{"label value", func(j *sundialv1.Job) { j.Labels = map[string]string{"k": strings.Repeat("v", MaxLabelValueLen+1)} }, `labels["k"]`, "value must be"},
		{"too many labels", func(j *sundialv1.Job) {
			j.Labels = map[string]string{}
			for i := range MaxLabels + 1 {
				j.Labels[strings.Repeat("k", i+1)] = "v"
			}
		}, "labels", "at most"},
		{"attempts negative", func(j *sundialv1.Job) { j.Retry = &sundialv1.RetryPolicy{MaxAttempts: -1} }, "retry.max_attempts", "between 1 and"},
		{"attempts many", func(j *sundialv1.Job) { j.Retry = &sundialv1.RetryPolicy{MaxAttempts: MaxAttempts + 1} }, "retry.max_attempts", "between 1 and"},
		{"backoff", func(j *sundialv1.Job) { j.Retry = &sundialv1.RetryPolicy{Backoff: 8} }, "retry.backoff", "unknown value"},
		{"initial delay negative", func(j *sundialv1.Job) { j.Retry = &sundialv1.RetryPolicy{InitialDelay: dur(-time.Second)} }, "retry.initial_delay", "between 0 and"},
		{"max below initial", func(j *sundialv1.Job) {
			j.Retry = &sundialv1.RetryPolicy{InitialDelay: dur(time.Minute), MaxDelay: dur(time.Second)}
		}, "retry.max_delay", "less than initial_delay"},
		{"initial above default max", func(j *sundialv1.Job) {
			j.Retry = &sundialv1.RetryPolicy{InitialDelay: dur(10 * time.Minute)}
		}, "retry.max_delay", "must be set"},
		{"max delay huge", func(j *sundialv1.Job) { j.Retry = &sundialv1.RetryPolicy{MaxDelay: dur(48 * time.Hour)} }, "retry.max_delay", "between 0 and"},
		{"invalid duration", func(j *sundialv1.Job) {
			j.Retry = &sundialv1.RetryPolicy{MaxDelay: &durationpb.Duration{Seconds: 1, Nanos: -5}}
		}, "retry.max_delay", "not a valid duration"},
		{"attempt timeout zero", func(j *sundialv1.Job) { j.AttemptTimeout = dur(0) }, "attempt_timeout", "greater than 0"},
		{"attempt timeout long", func(j *sundialv1.Job) { j.AttemptTimeout = dur(2 * time.Hour) }, "attempt_timeout", "at most 1h"},
		{"misfire action", func(j *sundialv1.Job) { j.Misfire = &sundialv1.MisfirePolicy{Action: 5} }, "misfire.action", "unknown value"},
		{"misfire grace", func(j *sundialv1.Job) { j.Misfire = &sundialv1.MisfirePolicy{Grace: dur(-time.Minute)} }, "misfire.grace", "between 0 and"},
		{"misfire cap", func(j *sundialv1.Job) { j.Misfire = &sundialv1.MisfirePolicy{MaxCatchUp: -2} }, "misfire.max_catch_up", "between 1 and"},
		{"overlap", func(j *sundialv1.Job) { j.Overlap = 7 }, "overlap", "unknown value"},
		{"concurrency negative", func(j *sundialv1.Job) { j.MaxConcurrency = -1 }, "max_concurrency", "between 0 and 100"},
		{"concurrency big", func(j *sundialv1.Job) {
			j.Overlap, j.MaxConcurrency = sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP, 101
		}, "max_concurrency", "between 0 and 100"},
		{"concurrency under allow", func(j *sundialv1.Job) { j.MaxConcurrency = 2 }, "max_concurrency", "other than ALLOW"},
		{"cancel url", func(j *sundialv1.Job) {
			j.Target = &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://x.example/run", CancelUrl: "ftp://x"}}}
		}, "target.http.cancel_url", "absolute http or https"},
		{"jitter negative", func(j *sundialv1.Job) { j.MaxJitter = dur(-time.Second) }, "max_jitter", "must be between 0 and 60s"},
		{"jitter big", func(j *sundialv1.Job) { j.MaxJitter = dur(61 * time.Second) }, "max_jitter", "must be between 0 and 60s"},
		{"callback", func(j *sundialv1.Job) { j.CallbackUrl = "mailto:x@y" }, "callback_url", "absolute http or https"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := goodJob()
			tc.mutate(j)
			before := proto.Clone(j)
			err := Validate(j)
			var verr *Error
			if !errors.As(err, &verr) {
				t.Fatalf("Validate = %v, want *Error", err)
			}
			if !proto.Equal(before, j) {
				t.Fatal("Validate modified the job")
			}
			var found bool
			for _, v := range verr.Violations {
				if v.Field == tc.field && strings.Contains(v.Description, tc.desc) {
					found = true
				}
			}
			if !found {
				t.Fatalf("no violation on %s containing %q; got %v", tc.field, tc.desc, verr.Violations)
			}
			if !strings.Contains(err.Error(), tc.field+": ") {
				t.Fatalf("message %q does not name %s", err.Error(), tc.field)
			}
		})
	}
}

func TestValidateCronMessageMatchesEngine(t *testing.T) {
	j := goodJob()
	j.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "0 0 32 * *"}
	err := Validate(j)
	_, perr := schedule.Parse("0 0 32 * *", schedule.Options{})
	var pe *schedule.ParseError
	if !errors.As(perr, &pe) {
		t.Fatalf("engine error %v is not a *ParseError", perr)
	}
	want := "schedule.cron: " + strings.TrimPrefix(pe.Error(), "schedule: ")
	if err == nil || err.Error() != want {
		t.Fatalf("Validate = %v, want %q", err, want)
	}
}

func TestValidateCollectsEveryProblem(t *testing.T) {
	j := &sundialv1.Job{
		Schedule:  &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 32 * *"}, Timezone: "Nowhere/Land"},
		Target:    &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "nope"}}},
		MaxJitter: dur(2 * time.Minute),
		Priority:  42,
	}
	err := Validate(j)
	var verr *Error
	if !errors.As(err, &verr) {
		t.Fatalf("Validate = %v", err)
	}
	got := map[string]bool{}
	for _, v := range verr.Violations {
		got[v.Field] = true
	}
	for _, f := range []string{"schedule.cron", "schedule.timezone", "target.http.url", "max_jitter", "priority"} {
		if !got[f] {
			t.Errorf("missing violation for %s in %v", f, verr.Violations)
		}
	}
}

func TestValidateNil(t *testing.T) {
	var verr *Error
	if err := Validate(nil); !errors.As(err, &verr) || verr.Violations[0].Field != "job" {
		t.Fatalf("Validate(nil) = %v", err)
	}
	if err := ValidateSchedule(nil); !errors.As(err, &verr) || verr.Violations[0].Field != "schedule" {
		t.Fatalf("ValidateSchedule(nil) = %v", err)
	}
}

func TestValidateLabels(t *testing.T) {
	if err := ValidateLabels("labels", map[string]string{"team": "a"}); err != nil {
		t.Fatal(err)
	}
	err := ValidateLabels("labels", map[string]string{"a b": "c"})
	if err == nil || !strings.HasPrefix(err.Error(), `labels["a b"]: `) {
		t.Fatalf("ValidateLabels = %v", err)
	}
}

func TestNormalizeFillsDefaults(t *testing.T) {
	j := goodJob()
	Normalize(j)
	want := &sundialv1.Job{
		Name: "nightly report",
		Schedule: &sundialv1.Schedule{
			Spec:      &sundialv1.Schedule_Cron{Cron: "0 3 * * *"},
			Timezone:  "UTC",
			DstGap:    sundialv1.DstGapPolicy_DST_GAP_POLICY_SHIFT,
			DstRepeat: sundialv1.DstRepeatPolicy_DST_REPEAT_POLICY_FIRST,
		},
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{
			Url: "https://reports.internal.example/run", Method: "POST",
		}}},
		Priority:       sundialv1.Priority_PRIORITY_MEDIUM,
		AttemptTimeout: dur(30 * time.Second),
		Retry: &sundialv1.RetryPolicy{
			MaxAttempts: 1, Backoff: sundialv1.Backoff_BACKOFF_EXPONENTIAL,
			InitialDelay: dur(time.Second), MaxDelay: dur(time.Minute),
		},
		Misfire: &sundialv1.MisfirePolicy{
			Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, Grace: dur(time.Hour), MaxCatchUp: 10,
		},
		Overlap: sundialv1.OverlapPolicy_OVERLAP_POLICY_ALLOW,
	}
	if !proto.Equal(j, want) {
		t.Fatalf("Normalize:\n got %v\nwant %v", j, want)
	}
	// Idempotent.
	again := proto.Clone(j).(*sundialv1.Job)
	Normalize(again)
	if !proto.Equal(j, again) {
		t.Fatal("Normalize is not idempotent")
	}
}

func TestNormalizeKeepsSetFields(t *testing.T) {
	j := goodJob()
	j.Priority = sundialv1.Priority_PRIORITY_LOW
	j.AttemptTimeout = dur(time.Second)
	j.Retry = &sundialv1.RetryPolicy{MaxAttempts: 3, InitialDelay: dur(0)}
	j.Misfire = &sundialv1.MisfirePolicy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, Grace: dur(0)}
	j.Schedule.Timezone = "Europe/Paris"
	httpTarget(j).Method = "patch"
	Normalize(j)
	if j.Priority != sundialv1.Priority_PRIORITY_LOW || j.AttemptTimeout.AsDuration() != time.Second {
		t.Fatalf("priority/timeout overwritten: %v", j)
	}
	if j.Retry.MaxAttempts != 3 || j.Retry.InitialDelay.AsDuration() != 0 || j.Retry.MaxDelay.AsDuration() != time.Minute || j.Retry.Backoff != DefaultBackoff {
		t.Fatalf("retry: %v", j.Retry)
	}
	if j.Misfire.Action != sundialv1.MisfireAction_MISFIRE_ACTION_SKIP || j.Misfire.Grace.AsDuration() != 0 || j.Misfire.MaxCatchUp != 10 {
		t.Fatalf("misfire: %v", j.Misfire)
	}
	if j.Schedule.Timezone != "Europe/Paris" || httpTarget(j).Method != "PATCH" {
		t.Fatalf("schedule/method: %v", j)
	}
	Normalize(nil) // must not panic
}

func collect(s schedule.Schedule, from time.Time, n int) []time.Time {
	var out []time.Time
	for t := range schedule.Preview(s, from, n) {
		out = append(out, t.UTC())
	}
	return out
}

func utc(s string) time.Time {
	return ts(s).AsTime()
}

func TestScheduleBuildsEngineSchedule(t *testing.T) {
	created := utc("2026-03-01T10:00:07Z")
	cases := []struct {
		name  string
		sched *sundialv1.Schedule
		from  time.Time
		want  []string
	}{
		{
			name:  "cron in zone",
			sched: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 9 * * *"}, Timezone: "America/New_York"},
			from:  utc("2026-03-06T00:00:00Z"),
			// 2026-03-08 is the US spring-forward: 09:00 EST is 14:00Z, then EDT 13:00Z.
			want: []string{"2026-03-06T14:00:00Z", "2026-03-07T14:00:00Z", "2026-03-08T13:00:00Z"},
		},
		{
			name: "cron gap skip",
			sched: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "30 2 * * *"}, Timezone: "America/New_York",
				DstGap: sundialv1.DstGapPolicy_DST_GAP_POLICY_SKIP},
			from: utc("2026-03-07T00:00:00Z"),
			want: []string{"2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"},
		},
		{
			name:  "cron gap shift (default)",
			sched: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "30 2 * * *"}, Timezone: "America/New_York"},
			from:  utc("2026-03-07T00:00:00Z"),
			want:  []string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"},
		},
		{
			name: "cron repeat both",
			sched: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "30 1 * * *"}, Timezone: "America/New_York",
				DstRepeat: sundialv1.DstRepeatPolicy_DST_REPEAT_POLICY_BOTH},
			from: utc("2026-11-01T00:00:00Z"),
			want: []string{"2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z"},
		},
		{
			name: "cron bounds",
			sched: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 * * * *"},
				StartTime: ts("2026-03-01T12:00:00Z"), EndTime: ts("2026-03-01T14:00:00Z")},
			from: created,
			want: []string{"2026-03-01T12:00:00Z", "2026-03-01T13:00:00Z", "2026-03-01T14:00:00Z"},
		},
		{
			name:  "once",
			sched: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: ts("2026-03-02T00:00:00Z")}},
			from:  created,
			want:  []string{"2026-03-02T00:00:00Z"},
		},
		{
			name:  "once in the past",
			sched: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: ts("2026-02-02T00:00:00Z")}},
			from:  created,
			want:  nil,
		},
		{
			name:  "interval anchored at creation",
			sched: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Interval{Interval: dur(time.Minute)}},
			from:  created,
			want:  []string{"2026-03-01T10:01:07Z", "2026-03-01T10:02:07Z", "2026-03-01T10:03:07Z"},
		},
		{
			name:  "interval anchored at start",
			sched: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Interval{Interval: dur(time.Hour)}, StartTime: ts("2026-03-01T12:30:00Z")},
			from:  created,
			want:  []string{"2026-03-01T12:30:00Z", "2026-03-01T13:30:00Z", "2026-03-01T14:30:00Z"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Schedule(&sundialv1.Job{Schedule: tc.sched}, created)
			if err != nil {
				t.Fatal(err)
			}
			got := collect(s, tc.from, 3)
			var want []time.Time
			for _, w := range tc.want {
				want = append(want, utc(w))
			}
			if len(got) != len(want) {
				t.Fatalf("got %v, want %v", got, want)
			}
			for i := range got {
				if !got[i].Equal(want[i]) {
					t.Fatalf("got %v, want %v", got, want)
				}
			}
		})
	}
}

func TestIntervalAnchorIsWholeSeconds(t *testing.T) {
	created := time.Date(2026, 3, 1, 10, 0, 7, 654321000, time.UTC)
	s, err := Schedule(&sundialv1.Job{Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Interval{Interval: dur(time.Minute)}}}, created)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Next(created).UTC(), time.Date(2026, 3, 1, 10, 1, 7, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("first slot %v, want %v", got, want)
	}
}

func TestScheduleRejectsInvalid(t *testing.T) {
	for name, s := range map[string]*sundialv1.Schedule{
		"nil":      nil,
		"empty":    {},
		"cron":     {Spec: &sundialv1.Schedule_Cron{Cron: "61 * * * *"}},
		"zone":     {Spec: &sundialv1.Schedule_Cron{Cron: "* * * * *"}, Timezone: "Not/AZone"},
		"interval": {Spec: &sundialv1.Schedule_Interval{Interval: dur(time.Millisecond)}},
	} {
		if _, err := FromProto(s, time.Unix(0, 0)); err == nil {
			t.Errorf("%s: FromProto accepted %v", name, s)
		}
	}
}

func TestEnvelope(t *testing.T) {
	j := goodJob()
	j.Id, j.Tenant, j.Version = "0190a5d0-0000-7000-8000-000000000001", "acme", 7
	j.Payload = []byte(`{"a":1}`)
	j.CallbackUrl = "https://cb.example/"
	j.Overlap = sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP
	scheduled := utc("2026-03-01T10:00:00Z")
	fire := scheduled.Add(1500 * time.Millisecond)

	// A job stored without defaults still yields a complete envelope.
	f := firing.New(j, firing.Attempt{Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE, ExecutionID: "exec-1", Scheduled: scheduled, Fire: fire, Number: 2})
	want := &sundialv1.Firing{
		ExecutionId: "exec-1", JobId: j.Id, Tenant: "acme", JobVersion: 7, Attempt: 2,
		Priority:      sundialv1.Priority_PRIORITY_MEDIUM,
		ScheduledTime: timestamppb.New(scheduled), FireTime: timestamppb.New(fire),
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{
			Url: "https://reports.internal.example/run", Method: "POST",
		}}},
		Payload:        []byte(`{"a":1}`),
		AttemptTimeout: dur(30 * time.Second),
		Retry: &sundialv1.RetryPolicy{MaxAttempts: 1, Backoff: sundialv1.Backoff_BACKOFF_EXPONENTIAL,
			InitialDelay: dur(time.Second), MaxDelay: dur(time.Minute)},
		Overlap:     sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP,
		CallbackUrl: "https://cb.example/",
		Origin:      sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE,
	}
	if !proto.Equal(f, want) {
		t.Fatalf("firing.New:\n got %v\nwant %v", f, want)
	}
	// The normalized job gives the same envelope, with the misfire policy
	// Normalize filled in (a worker judging a late firing reads it there;
	// without one it applies the same defaults).
	n := proto.Clone(j).(*sundialv1.Job)
	Normalize(n)
	wantN := proto.Clone(want).(*sundialv1.Firing)
	wantN.Misfire = n.GetMisfire()
	if wantN.GetMisfire() == nil {
		t.Fatal("Normalize left the misfire policy unset")
	}
	if g := firing.New(n, firing.Attempt{Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE, ExecutionID: "exec-1", Scheduled: scheduled, Fire: fire, Number: 2}); !proto.Equal(g, wantN) {
		t.Fatalf("firing.New of normalized job:\n got %v\nwant %v", g, wantN)
	}
	// The envelope owns its target: changing it leaves the job alone.
	f.Target.GetHttp().Url = "https://changed.example/"
	if httpTarget(j).Url != "https://reports.internal.example/run" {
		t.Fatal("firing.New shares the job's target")
	}
	if b := firing.New(j, firing.Attempt{Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_BACKFILL, ExecutionID: "e", Scheduled: scheduled, Fire: fire, Number: 1}); !b.CatchUp {
		t.Fatal("a backfill firing must be catch-up")
	}
	if tr := firing.New(j, firing.Attempt{Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_TRIGGER, ExecutionID: "e", Scheduled: scheduled, Fire: fire, Number: 1}); tr.CatchUp {
		t.Fatal("a trigger is not catch-up")
	}
}
