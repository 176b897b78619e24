package console

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// gocql runs schema and topology event handlers in goroutines of
		// their own that Session.Close does not wait for (the browser
		// tests' ledger creates a keyspace, which raises a schema event).
		goleak.IgnoreAnyFunction("github.com/gocql/gocql.(*Session).handleSchemaEvent"),
		goleak.IgnoreAnyFunction("github.com/gocql/gocql.(*Session).handleNodeEvent"),
	)
}

func TestSessionTokenSealedUnderItsID(t *testing.T) {
	sid, err := newSessionID()
	if err != nil {
		t.Fatal(err)
	}
	if !validID(sid) || validID(sid[1:]) || validID("x") {
		t.Fatal("validID accepts only 32 random bytes, base64url")
	}
	other, _ := newSessionID()
	if sid == other {
		t.Fatal("two session ids are the same")
	}
	box, err := sealToken(sid, "tok-acme")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(box), "tok-acme") {
		t.Fatal("the stored box carries the token in clear")
	}
	if got, ok := openToken(sid, box); !ok || got != "tok-acme" {
		t.Fatalf("openToken = %q %v", got, ok)
	}
	if _, ok := openToken(other, box); ok {
		t.Fatal("another session id opened the token")
	}
	box[len(box)-1] ^= 1
	if _, ok := openToken(sid, box); ok {
		t.Fatal("a tampered box opened")
	}
	h := idHash(sid)
	if strings.Contains(string(h[:]), sid) {
		t.Fatal("the row key is the id itself")
	}
}

func TestCSRFBoundToSession(t *testing.T) {
	a, b := csrfOf("session-a"), csrfOf("session-b")
	if !checkCSRF("session-a", a) || checkCSRF("session-a", b) || checkCSRF("session-a", "") {
		t.Fatal("a CSRF token works only for its own session")
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{"/jobs?x=1": "/jobs?x=1", "//evil.example": "/", "https://evil.example": "/", "/\\evil": "/", "": "/"} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBannerOnlyFromFixedCodes(t *testing.T) {
	for q, want := range map[string]string{
		notice{code: "deleted"}.query():                                                      "Job deleted.",
		notice{code: "updated", fields: []string{"name", "schedule.cron"}}.query():           "Job updated: name, schedule.cron.",
		notice{code: "backfilled", n: 12}.query():                                            "Job backfilled: 12 firing(s) staged.",
		notice{code: "bulk-paused", n: 5, m: 1000, k: 2}.query():                             "Paused: 5 job(s), 1,000 already so; 2 refused (the list shows which are left).",
		notice{code: "triggered", execution: "0193a4b2-7c1d-7e00-8a00-0123456789ab"}.query(): "Job triggered: execution 0193a4b2-7c1d-7e00-8a00-0123456789ab.",
		// Forged: unknown codes, free text, words where figures or
		// fields go, show nothing.
		"done=deleted.%20Your%20session%20expired%20-%20sign%20in%20at%20https://evil.example": "",
		"done=Your+session+expired":                        "",
		"done=backfilled&n=12+firings.+Sign+in+at+evil":    "",
		"done=backfilled&n=-1":                             "",
		"done=backfilled&n=012":                            "",
		"done=updated&fields=name,sign.in.at.evil.example": "",
		"done=triggered&execution=sign-in-at-evil-example": "",
		"done=cancel-requested":                            "",
		"":                                                 "",
	} {
		v, err := url.ParseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		if got := bannerOf(v); got != want {
			t.Errorf("bannerOf(%s) = %q, want %q", q, got, want)
		}
	}
}

func TestEveryEditPathHasABanner(t *testing.T) {
	was := form{Kind: "http", Cron: "* * * * *"}
	was.SchedKind = "cron"
	now := form{Kind: "http", Name: "x", URL: "https://a.example", Method: "POST",
		Headers: "A: b", MaxAttempts: "3", Backoff: "linear", InitialDelay: "1s", MaxDelay: "1m", Misfire: "skip",
		MisfireGrace: "1m", MaxCatchUp: "2", Overlap: "skip", Timeout: "5s", Jitter: "1s", Callback: "https://c.example",
		Payload: "{}", Priority: "high", Labels: "a=b", Timezone: "UTC"}
	now.SchedKind, now.RRule, now.DstGap, now.DstRepeat, now.Calendar, now.CalPolicy = "rrule", "FREQ=DAILY", "skip", "first", "c", "skip"
	now.Start, now.End = "2026-01-01T00:00", "2027-01-01T00:00"
	paths := changedPaths(now, was)
	if len(paths) < 20 {
		t.Fatalf("the form changed only %v", paths)
	}
	for _, p := range paths {
		if !editPaths[p] {
			t.Errorf("edit path %q would show no banner", p)
		}
	}
}

func TestThrottleDelayGrowsToItsCap(t *testing.T) {
	th := newThrottle(nil, nil, 5, time.Second, 5*time.Minute, newMetrics(nil))
	for n, want := range map[int]time.Duration{0: 0, 4: 0, 5: time.Second, 6: 2 * time.Second, 7: 4 * time.Second, 13: 256 * time.Second, 14: 5 * time.Minute, 1000: 5 * time.Minute} {
		if got := th.delay(n); got != want {
			t.Errorf("delay(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestThrottleKeys(t *testing.T) {
	for in, want := range map[string]string{"192.0.2.7:5123": "192.0.2.7", "[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64", "[::ffff:192.0.2.7]:1": "192.0.2.7"} {
		if got := sourceOf(in); got != want {
			t.Errorf("sourceOf(%q) = %q, want %q", in, got, want)
		}
	}
	if id, ok := tokenID("sdl_0123456789abcdef_secret"); !ok || id != "0123456789abcdef" {
		t.Fatalf("tokenID = %q %v", id, ok)
	}
	for _, bad := range []string{"tok-acme", "sdl_0123_secret", "sdl_0123456789abcdeg_secret", "sdl_0123456789abcdef"} {
		if _, ok := tokenID(bad); ok {
			t.Errorf("tokenID(%q) found an id", bad)
		}
	}
}

func TestAuditSampledPerSourceAndInAll(t *testing.T) {
	th := newThrottle(nil, nil, 5, time.Second, time.Minute, newMetrics(nil))
	now := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	n := 0
	for range 100 {
		if th.admit("192.0.2.1", now) {
			n++
		}
	}
	if n != auditPerSource {
		t.Fatalf("one source wrote %d rows in a minute, want %d", n, auditPerSource)
	}
	n = 0
	for i := range 1000 {
		if th.admit("src"+string(rune('a'+i%26))+strings.Repeat("x", i/26), now) {
			n++
		}
	}
	if n != auditPerMinute-auditPerSource {
		t.Fatalf("many sources wrote %d more rows in a minute, want %d", n, auditPerMinute-auditPerSource)
	}
	if !th.admit("192.0.2.1", now.Add(time.Minute)) {
		t.Fatal("the next minute's budget did not start")
	}
}
