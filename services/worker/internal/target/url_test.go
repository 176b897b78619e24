package target

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// wire is a transport that sends nothing: it writes each request as net/http
// would put it on a connection, keeps the bytes, and answers 204.
type wire struct {
	http.RoundTripper
	sent [][]byte
	err  error
}

func (w *wire) RoundTrip(r *http.Request) (*http.Response, error) {
	var b bytes.Buffer
	if err := r.Write(&b); err != nil {
		w.err = err
		return nil, err
	}
	w.sent = append(w.sent, b.Bytes())
	return &http.Response{StatusCode: http.StatusNoContent, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// urlSeeds are the seeds of FuzzTargetURL: URLs the api refuses (each kind
// of problem jobspec.CheckURL names) and URLs it accepts.
var urlSeeds = []string{
	// refused
	"", "/hook", "example.com/run", "localhost:8080/run", "http:example.com/run", "ftp://x.example/run",
	"http:///run", "http://:8080/run", "https://u:p@x.example/", "https://@x.example/",
	"http://127.0.0.1:18500/x?q=a b", "http://x.example/a%zz", "http://x.example/a%4", "http://x.example/a%",
	"http://x.example/run#top", "http://x.example/\x00", "http://x.example/a\r\nHost: evil", "http://x.example/a\x7f",
	"http://x.example/café", "http://bücher.example/", `http://x.example/a"b<c>\d^e` + "`f{g|h}", "http://x.example/?ids[]=1",
	"http://[::1%25eth0]:80/", "http://[1.2.3.4]/", "http://[::1/", "http://[::1]x/", "http://x.example:0/",
	"http://x.example:65536/", "http://x.example:/", "http://x.example:80:81/", "http://a..b/", "http://ex%61mple.com/",
	"http://x.example/" + strings.Repeat("a", jobspec.MaxURLLen),
	// accepted
	"http://127.0.0.1:18500/x?q=a%20b", "https://example.com", "HTTPS://Reports.Example.COM/Run", "http://[::1]:8080/hook",
	"http://[2001:db8::1]/", "http://[::ffff:10.0.0.1]:80/x", "https://xn--caf-dma.example/caf%C3%A9?q=%E2%9C%93",
	"http://svc_internal.local:9000/a/b;c=d?e=f&g=h+i", "http://h.example/~user/a-b_c.d!$&'()*+,;=:@/x?/?:@",
	"https://h.example/x?", "http://h.example?", "http://h.example./", "http://1.2.3.4:65535/", "http://h.example/a%2Fb/%41%00%c3",
	"http://h.example//double/./dot/../segments",
}

// FuzzTargetURL feeds any string to the api's validator as a job's
// target.http.url, and fires what it accepts with the worker's own HTTP
// delivery (Fire: its URL check, its request building, net/http's client)
// over a transport that writes the request as it would go on the wire:
//
//   - Validate and the worker agree: a URL the api refuses is refused by
//     Fire too (invalid_target, permanent, nothing written), naming what
//     is wrong; a URL it accepts is sent.
//   - What goes on the wire is what was validated: the request line's
//     target is the URL's path (or "/") and query byte for byte, the Host
//     header is its host and port, and neither holds a space, a control
//     or a non-ASCII byte.
//   - A server reading those bytes sees the same request target and host.
func FuzzTargetURL(f *testing.F) {
	for _, s := range urlSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		job := &sundialv1.Job{
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@hourly"}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: raw}}},
		}
		verr := jobspec.Validate(job)
		var spec *jobspec.Error
		if verr != nil && (!errors.As(verr, &spec) || len(spec.Violations) != 1 || spec.Violations[0].Field != "target.http.url") {
			t.Fatalf("Validate(%q) = %v, want at most one violation, on target.http.url", raw, verr)
		}
		w := &wire{}
		h := NewHTTP(NewClient(w), secret)
		res := h.Fire(context.Background(), Request{Firing: httpEnvelope(raw, nil), SentAt: sent})
		if verr != nil {
			// The worker says what the api said (a URL-less target in its
			// own words).
			says := raw == "" || res.Err != nil && strings.Contains(res.Err.Error(), spec.Violations[0].Description)
			if res.Class != ClassInvalidTarget || !res.Permanent || len(w.sent) != 0 || res.Err == nil || !says {
				t.Fatalf("the api refuses %q (%v), the worker: %+v, %d requests sent", raw, verr, res, len(w.sent))
			}
			return
		}
		if !res.OK || w.err != nil || len(w.sent) != 1 {
			t.Fatalf("the api accepts %q, the worker cannot send it: %+v (writing: %v)", raw, res, w.err)
		}
		_, rest, _ := strings.Cut(raw, "://")
		host, target := rest, ""
		if i := strings.IndexAny(rest, "/?"); i >= 0 {
			host, target = rest[:i], rest[i:]
		}
		if target == "" || target[0] == '?' {
			target = "/" + target
		}
		line, _, _ := bytes.Cut(w.sent[0], []byte("\r\n"))
		if want := "POST " + target + " HTTP/1.1"; string(line) != want {
			t.Fatalf("%q went out as %q, want %q", raw, line, want)
		}
		for _, part := range []string{target, host} {
			if i := strings.IndexFunc(part, func(r rune) bool { return r <= ' ' || r >= 0x7f }); i >= 0 {
				t.Fatalf("%q put %q on the wire, with byte %q", raw, part, part[i])
			}
		}
		got, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(w.sent[0])))
		if err != nil {
			t.Fatalf("a server cannot read the request for %q: %v\n%s", raw, err, w.sent[0])
		}
		defer got.Body.Close()
		if got.RequestURI != target || got.Host != host || got.URL.RequestURI() != target {
			t.Fatalf("for %q a server sees target %q (%q) on host %q, want %q on %q", raw, got.RequestURI, got.URL.RequestURI(), got.Host, target, host)
		}
	})
}

// A job stored before the api checked its URL (here with a space in the
// query) is not sent: the attempt fails at once as a permanent
// invalid_target, which dead-letters it, with a reason that says what to
// fix and does not quote the URL; the target never sees a request.
func TestHTTPRefusesAStoredBadURL(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer srv.Close()
	h := NewHTTP(srv.Client(), secret)
	for _, c := range []struct{ url, want string }{
		{srv.URL + "/x?token=s3cr3t&q=a b", "contains a space at character"},
		{srv.URL + "/x?token=s3cr3t%zz", "bad percent-escape"},
		{srv.URL + "/x?token=s3cr3t#part", "has a fragment"},
		{srv.URL + "/x?token=s3cr3t|", "percent-encode it as %7C"},
	} {
		r := h.Fire(context.Background(), Request{Firing: httpEnvelope(c.url, nil), SentAt: sent})
		if r.Class != ClassInvalidTarget || !r.Permanent || r.Err == nil || !strings.Contains(r.Err.Error(), c.want) ||
			!strings.Contains(r.Err.Error(), "update the job's URL") || strings.Contains(r.Err.Error(), "s3cr3t") {
			t.Errorf("%q: %+v, want a permanent invalid_target saying %q without the query", c.url, r, c.want)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the target got %d requests", n)
	}
	// The same URL escaped is sent.
	if r := h.Fire(context.Background(), Request{Firing: httpEnvelope(srv.URL+"/x?q=a%20b", nil), SentAt: sent}); !r.OK || hits.Load() != 1 {
		t.Fatalf("escaped: %+v, %d requests", r, hits.Load())
	}
}
