package target

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// HTTP delivers attempts as HTTP requests. The request body is the payload;
// the job's headers are sent first and Sundial's identity headers override
// any of the same name, so a job cannot forge its own fence or signature.
type HTTP struct {
	client *http.Client
	secret []byte
	// DefaultTimeout applies when the envelope has no attempt timeout.
	DefaultTimeout time.Duration
}

// NewHTTP returns an HTTP delivery signing with secret. client nil means a
// client tuned for many concurrent attempts to few hosts.
func NewHTTP(client *http.Client, secret []byte) *HTTP {
	if client == nil {
		tr := &http.Transport{
			Proxy:       http.ProxyFromEnvironment,
			DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			// Firings to one host come in bursts (top of the minute);
			// keeping connections open saves a handshake on each.
			MaxIdleConns:          1024,
			MaxIdleConnsPerHost:   128,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   5 * time.Second,
			ExpectContinueTimeout: time.Second,
			ForceAttemptHTTP2:     true,
		}
		// Redirects would resend a signed request to a host the job did
		// not name; the attempt's outcome is the first response.
		client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &HTTP{client: client, secret: secret, DefaultTimeout: 30 * time.Second}
}

// Fire implements Target. Any 2xx is success.
func (h *HTTP) Fire(ctx context.Context, req Request) Result {
	t := req.Firing.GetTarget().GetHttp()
	if t == nil || t.GetUrl() == "" {
		return errorf("target: http target without url")
	}
	timeout := h.DefaultTimeout
	if d := req.Firing.GetAttemptTimeout(); d != nil && d.AsDuration() > 0 {
		timeout = d.AsDuration()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	method := strings.ToUpper(t.GetMethod())
	if method == "" {
		method = http.MethodPost
	}
	r, err := http.NewRequestWithContext(ctx, method, t.GetUrl(), bytes.NewReader(req.Firing.GetPayload()))
	if err != nil {
		return errorf("target: build request: %w", err)
	}
	for k, v := range t.GetHeaders() {
		r.Header.Set(k, v)
	}
	if r.Header.Get("Content-Type") == "" && len(req.Firing.GetPayload()) > 0 {
		r.Header.Set("Content-Type", "application/octet-stream")
	}
	r.Header.Set("User-Agent", "sundial-worker")
	for _, hd := range Headers(h.secret, req) {
		r.Header.Set(hd.Name, hd.Value)
	}
	resp, err := h.client.Do(r)
	if err != nil {
		return Result{Err: fmt.Errorf("target: %s %s: %w", method, t.GetUrl(), err)}
	}
	defer resp.Body.Close()
	buf, _ := io.ReadAll(io.LimitReader(resp.Body, ExcerptLimit))
	// Read a little more so the connection can be reused, but never wait
	// long on a large or slow body.
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	res := Result{
		OK:         resp.StatusCode >= 200 && resp.StatusCode < 300,
		HTTPStatus: resp.StatusCode,
		Excerpt:    strings.ToValidUTF8(string(buf), "\uFFFD"),
	}
	if len(res.Excerpt) > ExcerptLimit {
		res.Excerpt = truncateUTF8(res.Excerpt, ExcerptLimit)
	}
	if !res.OK {
		res.Err = fmt.Errorf("target: %s %s: status %d", method, t.GetUrl(), resp.StatusCode)
	}
	return res
}

// truncateUTF8 cuts s to at most n bytes without splitting a rune.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xC0) == 0x80 {
		n--
	}
	return s[:n]
}
