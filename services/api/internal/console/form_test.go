package console

import (
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Header lines: "Name: value", blank lines ignored, a secret reference
// kept as written; a line without a colon or a name given twice is an
// error naming the line.
func TestParseHeaders(t *testing.T) {
	got, err := parseHeaders("Authorization: {{secret:billing-token}}\n\n X-Team :billing \r\n")
	if err != nil || len(got) != 2 || got["Authorization"] != "{{secret:billing-token}}" || got["X-Team"] != "billing" {
		t.Fatalf("%v %v", got, err)
	}
	for in, want := range map[string]string{"X-A: 1\nno colon": "line 2: write Name: value", ": v": "line 1: write Name: value", "A: 1\nA: 2": "line 2: A is given twice"} {
		if _, err := parseHeaders(in); err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// A job read into the form and sent back unchanged changes nothing; each
// change is its own mask path, and a change of target kind replaces the
// whole target.
func TestFormRoundTripAndChangedPaths(t *testing.T) {
	job := &sundialv1.Job{
		Name: "nightly", Labels: map[string]string{"team": "billing"}, Priority: sundialv1.Priority_PRIORITY_HIGH,
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 2 * * *"}, Timezone: "Europe/Paris"},
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://x.example/run", Method: "PUT",
			Headers: map[string]string{"Authorization": "{{secret:tok}}", "X-Team": "billing"}}}},
		Retry: &sundialv1.RetryPolicy{MaxAttempts: 5, Backoff: sundialv1.Backoff_BACKOFF_EXPONENTIAL_WITH_JITTER,
			InitialDelay: durationpb.New(90e9), MaxDelay: durationpb.New(600e9)},
	}
	was := formOf(job)
	if was.Headers != "Authorization: {{secret:tok}}\nX-Team: billing\n" || was.InitialDelay != "1m30s" || was.Backoff != "exponential_with_jitter" {
		t.Fatalf("formOf: %+v", was)
	}
	values := func(f form) url.Values {
		return url.Values{"name": {f.Name}, "cron": {f.Cron}, "timezone": {f.Timezone}, "kind": {f.Kind}, "url": {f.URL}, "method": {f.Method},
			"headers": {f.Headers}, "topic": {f.Topic}, "key": {f.Key}, "max_attempts": {f.MaxAttempts}, "backoff": {f.Backoff},
			"initial_delay": {f.InitialDelay}, "max_delay": {f.MaxDelay}, "payload": {f.Payload}, "priority": {f.Priority}, "labels": {f.Labels}}
	}
	read := func(v url.Values) (form, *sundialv1.Job) {
		r := httptest.NewRequest("POST", "/jobs/new", strings.NewReader(v.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return readForm(r)
	}
	f, back := read(values(was))
	if len(f.Errors) != 0 || !proto.Equal(back.GetTarget(), job.GetTarget()) || !proto.Equal(back.GetRetry(), job.GetRetry()) {
		t.Fatalf("round trip: %v\n%v\n%v", f.Errors, back.GetTarget(), back.GetRetry())
	}
	if p := changedPaths(f, was); len(p) != 0 {
		t.Fatalf("unchanged form changes %v", p)
	}

	v := values(was)
	v.Set("headers", "X-Team: ops\nAuthorization:{{secret:tok}}")
	v.Set("initial_delay", "90s") // the same duration, written otherwise
	v.Set("max_attempts", "3")
	f, _ = read(v)
	if p := changedPaths(f, was); !slices.Equal(p, []string{"target.http.headers", "retry.max_attempts"}) {
		t.Fatalf("paths %v", p)
	}

	v = values(was)
	v.Set("kind", "kafka")
	v.Set("topic", "billing.nightly")
	f, back = read(v)
	if p := changedPaths(f, was); !slices.Equal(p, []string{"target"}) || back.GetTarget().GetKafka().GetTopic() != "billing.nightly" {
		t.Fatalf("to kafka: paths %v, target %v", p, back.GetTarget())
	}

	v = values(was)
	v.Set("headers", "no colon here")
	v.Set("max_attempts", "three")
	v.Set("max_delay", "10 minutes")
	v.Set("backoff", "linear")
	f, _ = read(v)
	for _, k := range []string{"Headers", "MaxAttempts", "MaxDelay", "Backoff"} {
		if f.Errors[k] == "" {
			t.Errorf("no error beside %s: %v", k, f.Errors)
		}
	}
}

// The api's field paths land beside the fields that hold them.
func TestFieldOf(t *testing.T) {
	http, kafka := &form{Kind: "http"}, &form{Kind: "kafka"}
	for path, want := range map[string]string{
		`target.http.headers["Authorization"]`: "Headers", "target.kafka.topic": "Topic", "target.kafka.key": "Key", "target.kafka": "Topic",
		"target.http.url": "URL", "retry.max_delay": "MaxDelay", "retry.initial_delay": "InitialDelay", "retry.backoff": "Backoff",
		"retry.max_attempts": "MaxAttempts", "schedule.cron": "Cron",
	} {
		if got := http.fieldOf(path); got != want {
			t.Errorf("%s: %s, want %s", path, got, want)
		}
	}
	if http.fieldOf("target") != "URL" || kafka.fieldOf("target") != "Topic" {
		t.Error("a whole-target error goes beside the chosen kind's first field")
	}
}
