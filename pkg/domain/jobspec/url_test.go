package jobspec

import (
	"errors"
	"strings"
	"testing"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// goodURLs are URLs the worker can send as written; FuzzTargetURL (in the
// worker's target package) seeds its corpus with the same kinds.
var goodURLs = []string{
	"http://127.0.0.1:18500/x?q=a%20b",
	"https://example.com",
	"https://example.com/",
	"HTTPS://Reports.Example.COM/Run",
	"http://[::1]:8080/hook",
	"http://[2001:db8::1]/",
	"http://[::ffff:10.0.0.1]:80/x",
	"https://xn--caf-dma.example/caf%C3%A9?q=%E2%9C%93",
	"http://svc_internal.local:9000/a/b;c=d?e=f&g=h+i",
	"http://h.example/~user/a-b_c.d!$&'()*+,;=:@/x?/?:@",
	"https://h.example/x?",
	"http://h.example./",
	"http://1.2.3.4:65535/",
	"http://h.example/a%2Fb/%41%00",
	"http://h.example:1/" + strings.Repeat("a", MaxURLLen-len("http://h.example:1/")),
}

func TestCheckURLAccepts(t *testing.T) {
	for _, u := range goodURLs {
		if err := CheckURL(u); err != nil {
			t.Errorf("CheckURL(%q) = %v, want nil", u, err)
		}
	}
}

// badURLs are the URLs CheckURL refuses, each with a piece of what the
// refusal must say.
var badURLs = []struct{ url, want string }{
	{"", "must be an absolute http or https URL"},
	{"/hook", "must be an absolute http or https URL"},
	{"example.com/run", "has no scheme (start it with https:// or http://)"},
	{"localhost:8080/run", "has no scheme"},
	{"127.0.0.1:18500/x", "has no scheme"},
	{"http:example.com/run", `write "http://" before the host`},
	{"HTTPS:/example.com/run", `write "https://" before the host`},
	{"ftp://x.example/run", `the scheme is "ftp"`},
	{"javascript://x.example/%0Aalert(1)", `the scheme is "javascript"`},
	{"1http://x.example/", "has no scheme"},
	{"http:///run", "has no host"},
	{"http://:8080/run", "has no host"},
	{"http://[]:80/", "has no host"},
	{"https://u:p@x.example/", "must not contain credentials"},
	{"https://u@x.example/", "must not contain credentials"},
	{"https://@x.example/", "must not contain credentials"},
	{"http://127.0.0.1:18500/x?q=a b", "contains a space at character 29: percent-encode it as %20"},
	{"http://x.example/a%zz", `bad percent-escape "%zz" at character 19`},
	{"http://x.example/a%4", `bad percent-escape "%4" at character 19`},
	{"http://x.example/a%", `bad percent-escape "%" at character 19`},
	{"http://x.example/a%4g", `bad percent-escape "%4g"`},
	{"http://x.example/run#top", "has a fragment (from '#' at character 21)"},
	{"http://x.example/run?a=1#", "has a fragment"},
	{"http://x.example/\x00", "control character (0x00) at character 18"},
	{"http://x.example/a\tb", "control character (0x09)"},
	{"http://x.example/a\r\nHost: evil", "control character (0x0D)"},
	{"http://x.example/a\x7f", "control character (0x7F)"},
	{"http://x.example/café", "non-ASCII character at character 21"},
	{"http://bücher.example/", "non-ASCII character at character 9"},
	{`http://x.example/a"b`, `contains '"' at character 19: percent-encode it as %22`},
	{"http://x.example/a<b>", "percent-encode it as %3C"},
	{`http://x.example/a\b`, "percent-encode it as %5C"},
	{"http://x.example/a^b", "percent-encode it as %5E"},
	{"http://x.example/a`b", "percent-encode it as %60"},
	{"http://x.example/?a={b}", "percent-encode it as %7B"},
	{"http://x.example/?a=b|c", "percent-encode it as %7C"},
	{"http://x.example/?ids[]=1", "'[' at character 22, which a URL allows only around an IPv6 host: percent-encode it as %5B"},
	{"http://x.example/a]", "percent-encode it as %5D"},
	{"http://[::1%25eth0]:80/", "has an IPv6 zone"},
	{"http://[1.2.3.4]/", "is not an IPv6 address"},
	{"http://[example.com]/", "is not an IPv6 address"},
	{"http://[::1/", "'[' without ']'"},
	{"http://[::1]x/", `has "x" after its IPv6 host`},
	{"http://x[1]/", "may contain only letters, digits"},
	{"http://x.example:0/", `port "0" is not a number from 1 to 65535`},
	{"http://x.example:65536/", `port "65536"`},
	{"http://x.example:http/", `port "http"`},
	{"http://x.example:+80/", `port "+80"`},
	{"http://x.example:/", "':' after the host but no port"},
	{"http://[::1]:/", "':' after the host but no port"},
	{"http://x.example:80:81/", "more than one ':' after the host"},
	{"http://::1/", "an IPv6 address goes in brackets"},
	{"http://a..b/", "empty label"},
	{"http://" + strings.Repeat("a", 64) + ".example/", "longer than 63"},
	{"http://" + strings.Repeat("abcdefghi.", 26) + "example/", "at most 253"},
	{"http://ex%61mple.com/", "may contain only letters, digits"},
	{"http://a!b.example/", "may contain only letters, digits"},
	{"http://x.example/" + strings.Repeat("a", MaxURLLen), "bytes, at most 2048 allowed"},
}

func TestCheckURLRefuses(t *testing.T) {
	for _, c := range badURLs {
		err := CheckURL(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckURL(%q) = %v, want an error containing %q", c.url, err, c.want)
		}
	}
}

// A refusal never repeats the query, where a token may sit: it says where
// the problem is, not what the URL holds.
func TestCheckURLDoesNotQuoteTheQuery(t *testing.T) {
	for _, u := range []string{
		"http://x.example/run?token=s3cr3t-value&q=a b",
		"http://x.example/run?token=s3cr3t-value#frag",
		"http://x.example/run?token=s3cr3t-value%zz",
		"http://x.example/run?token=s3cr3t-value|",
	} {
		if err := CheckURL(u); err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("CheckURL(%q) = %v, want a refusal that does not quote the query", u, err)
		}
	}
}

// Every URL of a job goes through the one check, each refusal named by its
// own field, and the job is not changed.
func TestValidateChecksEveryURLOfAJob(t *testing.T) {
	for _, c := range badURLs {
		for _, f := range []struct {
			field string
			set   func(*sundialv1.Job)
		}{
			{"target.http.url", func(j *sundialv1.Job) { httpTarget(j).Url = c.url }},
			{"target.http.cancel_url", func(j *sundialv1.Job) { httpTarget(j).CancelUrl = c.url }},
			{"callback_url", func(j *sundialv1.Job) { j.CallbackUrl = c.url }},
		} {
			if c.url == "" && f.field != "target.http.url" {
				continue // empty means "none" for the optional URLs
			}
			j := goodJob()
			f.set(j)
			var verr *Error
			if !errors.As(Validate(j), &verr) || len(verr.Violations) != 1 || verr.Violations[0].Field != f.field ||
				!strings.Contains(verr.Violations[0].Description, c.want) {
				t.Errorf("%s %q: %v, want one violation on %s containing %q", f.field, c.url, verr, f.field, c.want)
			}
		}
	}
	for _, u := range goodURLs {
		j := goodJob()
		httpTarget(j).Url, httpTarget(j).CancelUrl, j.CallbackUrl = u, u, u
		if err := Validate(j); err != nil {
			t.Errorf("%q: %v", u, err)
		}
	}
}
