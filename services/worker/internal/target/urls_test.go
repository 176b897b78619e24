package target

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The request built from a URL parsed once is the one net/http builds
// from the URL's text, byte for byte on the wire, for every URL the api
// accepts among the fuzz seeds; and building it leaves the shared parsed
// URL as it was.
func TestRequestFromParsedURL(t *testing.T) {
	n := 0
	for _, raw := range urlSeeds {
		p := urls.get(raw)
		if p.checkErr != nil || p.u == nil {
			continue
		}
		n++
		before := *p.u
		got, err := newRequest(context.Background(), http.MethodPost, p.u, []byte("payload"))
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		want, err := http.NewRequestWithContext(context.Background(), http.MethodPost, raw, bytes.NewReader([]byte("payload")))
		if err != nil {
			t.Fatalf("%q: net/http: %v", raw, err)
		}
		var gb, wb bytes.Buffer
		if err := got.Write(&gb); err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		if err := want.Write(&wb); err != nil {
			t.Fatalf("%q: net/http: %v", raw, err)
		}
		if gb.String() != wb.String() {
			t.Fatalf("%q goes out as\n%q\nnet/http sends\n%q", raw, gb.String(), wb.String())
		}
		got.URL.Path = "/changed"
		if *p.u != before {
			t.Fatalf("%q: building a request changed the shared parsed URL", raw)
		}
	}
	if n < 10 {
		t.Fatalf("only %d accepted URLs among the seeds", n)
	}
}

// Host is the lower-cased host and port of an HTTP firing's URL, empty for
// a URL that does not parse and for other targets.
func TestHostOfFiring(t *testing.T) {
	for _, c := range []struct {
		target *sundialv1.Target
		want   string
	}{
		{&sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "HTTPS://Reports.Example.COM:8443/Run"}}}, "reports.example.com:8443"},
		{&sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://[::1]:8080/hook"}}}, "[::1]:8080"},
		{&sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://x.example/a%zz"}}}, ""},
		{&sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "t"}}}, ""},
	} {
		f := &sundialv1.Firing{Target: c.target}
		for range 2 { // parsed, then remembered
			if got := Host(f); got != c.want {
				t.Fatalf("Host(%v) = %q, want %q", c.target, got, c.want)
			}
		}
	}
}

// The cache forgets everything once it holds maxURLs URLs, and answers
// the same after.
func TestURLCacheBounded(t *testing.T) {
	c := &urlCache{urls: map[string]parsedURL{}}
	for i := range maxURLs + 10 {
		raw := fmt.Sprintf("http://h%d.example/x", i)
		if p := c.get(raw); p.host != fmt.Sprintf("h%d.example", i) || p.checkErr != nil {
			t.Fatalf("%q: %+v", raw, p)
		}
		if len(c.urls) > maxURLs {
			t.Fatalf("%d URLs held, at most %d", len(c.urls), maxURLs)
		}
	}
	if len(c.urls) != 10 {
		t.Fatalf("%d URLs held after starting over, want the 10 since", len(c.urls))
	}
	if p := c.get("http://x.example/a b"); p.checkErr == nil {
		t.Fatal("a URL the api refuses was not refused")
	}
}
