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
		Misfire: &sundialv1.MisfirePolicy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: durationpb.New(7200e9), MaxCatchUp: 5},
		Overlap: sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE, AttemptTimeout: durationpb.New(45e9), MaxJitter: durationpb.New(20e9),
		CallbackUrl: "https://x.example/done",
	}
	was := formOf(job)
	if was.Headers != "Authorization: {{secret:tok}}\nX-Team: billing\n" || was.InitialDelay != "1m30s" || was.Backoff != "exponential_with_jitter" ||
		was.Misfire != "run_all" || was.MisfireGrace != "2h0m0s" || was.MaxCatchUp != "5" || was.Overlap != "buffer_one" ||
		was.Timeout != "45s" || was.Jitter != "20s" || was.Callback != "https://x.example/done" {
		t.Fatalf("formOf: %+v", was)
	}
	values := func(f form) url.Values {
		return url.Values{"name": {f.Name}, "cron": {f.Cron}, "timezone": {f.Timezone}, "kind": {f.Kind}, "url": {f.URL}, "method": {f.Method},
			"headers": {f.Headers}, "topic": {f.Topic}, "key": {f.Key}, "max_attempts": {f.MaxAttempts}, "backoff": {f.Backoff},
			"initial_delay": {f.InitialDelay}, "max_delay": {f.MaxDelay}, "payload": {f.Payload}, "priority": {f.Priority}, "labels": {f.Labels},
			"misfire": {f.Misfire}, "misfire_grace": {f.MisfireGrace}, "max_catch_up": {f.MaxCatchUp}, "overlap": {f.Overlap},
			"attempt_timeout": {f.Timeout}, "max_jitter": {f.Jitter}, "callback_url": {f.Callback}}
	}
	read := func(v url.Values) (form, *sundialv1.Job) {
		r := httptest.NewRequest("POST", "/jobs/new", strings.NewReader(v.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return readForm(r)
	}
	f, back := read(values(was))
	if len(f.Errors) != 0 || !proto.Equal(back.GetTarget(), job.GetTarget()) || !proto.Equal(back.GetRetry(), job.GetRetry()) ||
		!proto.Equal(back.GetMisfire(), job.GetMisfire()) || back.GetOverlap() != job.GetOverlap() ||
		!proto.Equal(back.GetAttemptTimeout(), job.GetAttemptTimeout()) || !proto.Equal(back.GetMaxJitter(), job.GetMaxJitter()) ||
		back.GetCallbackUrl() != job.GetCallbackUrl() {
		t.Fatalf("round trip: %v\n%v\n%v\n%v", f.Errors, back.GetTarget(), back.GetRetry(), back)
	}
	if p := changedPaths(f, was); len(p) != 0 {
		t.Fatalf("unchanged form changes %v", p)
	}

	v := values(was)
	v.Set("headers", "X-Team: ops\nAuthorization:{{secret:tok}}")
	v.Set("initial_delay", "90s") // the same duration, written otherwise
	v.Set("max_attempts", "3")
	v.Set("misfire_grace", "120m") // the same grace, written otherwise
	v.Set("misfire", "skip")
	v.Set("overlap", "")
	v.Set("max_jitter", "0s")
	v.Set("callback_url", "")
	f, back = read(v)
	if p := changedPaths(f, was); !slices.Equal(p, []string{"target.http.headers", "retry.max_attempts", "misfire.action", "overlap", "max_jitter", "callback_url"}) {
		t.Fatalf("paths %v", p)
	}
	if back.GetMisfire().GetAction() != sundialv1.MisfireAction_MISFIRE_ACTION_SKIP || back.GetOverlap() != sundialv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED ||
		back.GetMaxJitter().AsDuration() != 0 || back.GetMaxJitter() == nil || back.GetCallbackUrl() != "" {
		t.Fatalf("changed policies read as %v", back)
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
	v.Set("misfire", "replay")
	v.Set("misfire_grace", "an hour")
	v.Set("max_catch_up", "many")
	v.Set("overlap", "queue")
	v.Set("attempt_timeout", "30")
	v.Set("max_jitter", "5 s")
	f, _ = read(v)
	for _, k := range []string{"Headers", "MaxAttempts", "MaxDelay", "Backoff", "Misfire", "MisfireGrace", "MaxCatchUp", "Overlap", "Timeout", "Jitter"} {
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
		"misfire.action": "Misfire", "misfire": "Misfire", "misfire.grace": "MisfireGrace", "misfire.max_catch_up": "MaxCatchUp",
		"overlap": "Overlap", "attempt_timeout": "Timeout", "max_jitter": "Jitter", "callback_url": "Callback",
	} {
		if got := http.fieldOf(path); got != want {
			t.Errorf("%s: %s, want %s", path, got, want)
		}
	}
	if http.fieldOf("target") != "URL" || kafka.fieldOf("target") != "Topic" {
		t.Error("a whole-target error goes beside the chosen kind's first field")
	}
}

// An edit that does not post the policy fields at all (a page rendered
// before they existed) keeps them; posted empty, they change.
func TestKeepPoliciesNotPosted(t *testing.T) {
	was := form{Kind: "http", Misfire: "skip", MisfireGrace: "2h0m0s", MaxCatchUp: "5", Overlap: "skip", Timeout: "45s", Jitter: "20s", Callback: "https://x.example/done"}
	post := func(v url.Values) []string {
		r := httptest.NewRequest("POST", "/jobs/x/edit", strings.NewReader(v.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		f, _ := readForm(r)
		keepPoliciesNotPosted(r, &f, was)
		var paths []string
		for _, p := range changedPaths(f, was) {
			if !slices.Contains([]string{"name", "schedule.cron", "schedule.timezone", "target.http.url", "target.http.method", "target.http.headers", "payload", "priority", "labels"}, p) {
				paths = append(paths, p)
			}
		}
		return paths
	}
	if p := post(url.Values{"name": {"n"}}); len(p) != 0 {
		t.Errorf("not posted, changed %v", p)
	}
	if p := post(url.Values{"name": {"n"}, "max_jitter": {""}, "callback_url": {""}}); !slices.Equal(p, []string{"max_jitter", "callback_url"}) {
		t.Errorf("posted empty: %v", p)
	}
}
