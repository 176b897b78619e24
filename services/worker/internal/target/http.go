package target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/netpolicy"
	"github.com/sundialhq/sundial/pkg/domain/secrets"
)

// Secrets expands `{{secret:NAME}}` references among one tenant's secrets;
// *secrets.Resolver is one.
type Secrets interface {
	Expand(tenant, s string) (string, []string, error)
}

// HTTP delivers attempts as HTTP requests. The request body is the payload;
// the job's headers are sent first (secret references expanded) and
// Sundial's identity headers override any of the same name, so a job cannot
// forge its own fence or signature.
type HTTP struct {
	client  *http.Client
	signer  Signer
	secrets Secrets
	policy  *netpolicy.Policy
	// DefaultTimeout applies when the envelope has no attempt timeout.
	DefaultTimeout time.Duration
}

// HTTPOption configures an HTTP delivery.
type HTTPOption func(*HTTP)

// WithSigner signs with s (each tenant's own keys) instead of the one
// secret NewHTTP was given.
func WithSigner(s Signer) HTTPOption { return func(h *HTTP) { h.signer = s } }

// WithSecrets expands secret references in the job's headers from s; without
// it, a header with a reference fails the attempt (class secret).
func WithSecrets(s Secrets) HTTPOption { return func(h *HTTP) { h.secrets = s } }

// WithPolicy checks each URL's host against p before sending (metadata
// names, literal addresses); the dial-time check is the client's transport
// (see NewTransport).
func WithPolicy(p *netpolicy.Policy) HTTPOption { return func(h *HTTP) { h.policy = p } }

// TransportOption configures NewTransport.
type TransportOption func(*net.Dialer)

// WithResolver resolves target host names with r instead of the system's
// resolver. The policy still judges the address each name resolves to when
// it is dialled, so whatever r answers — including a different address on
// every lookup, as a DNS rebinding attack does — is checked; tests use it to
// play such a resolver.
func WithResolver(r *net.Resolver) TransportOption { return func(d *net.Dialer) { d.Resolver = r } }

// NewTransport is the transport for requests on behalf of jobs (targets and
// completion callbacks): tuned for many concurrent requests to few hosts,
// every connection checked by policy (nil: no check) when it is dialled. It
// uses no proxy: a proxy would make the dial-time check judge the proxy's
// address instead of the target's.
func NewTransport(policy *netpolicy.Policy, opts ...TransportOption) *http.Transport {
	base := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	for _, o := range opts {
		o(&base)
	}
	dial := base.DialContext
	if policy != nil {
		dial = policy.Dialer(base).DialContext
	}
	return &http.Transport{
		DialContext: dial,
		// Firings to one host come in bursts (top of the minute);
		// keeping connections open saves a handshake on each.
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
}

// NewClient wraps a transport in a client that does not follow redirects:
// a redirect would resend a signed request to a host the job did not name.
func NewClient(tr http.RoundTripper) *http.Client {
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// NewHTTP returns an HTTP delivery signing with secret. client nil means
// NewClient(NewTransport(nil)): no outbound-address policy.
func NewHTTP(client *http.Client, secret []byte, opts ...HTTPOption) *HTTP {
	if client == nil {
		client = NewClient(NewTransport(nil))
	}
	h := &HTTP{client: client, signer: Secret(secret), DefaultTimeout: 30 * time.Second}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Fire implements Target. Any 2xx is success.
func (h *HTTP) Fire(ctx context.Context, req Request) Result {
	t := req.Firing.GetTarget().GetHttp()
	if t == nil || t.GetUrl() == "" {
		return invalidf("target: http target without url")
	}
	// The api's rule for a job's URLs, checked again here: a job stored
	// before the api checked as much (a space in the query, say) would
	// otherwise go out as written and fail at the target at every attempt.
	// Its firing is dead-lettered at once, saying what to fix; the URL is
	// not quoted, as its query may hold a token.
	p := urls.get(t.GetUrl())
	if p.checkErr != nil {
		return invalidf("target: url %w; update the job's URL", p.checkErr)
	}
	if p.u == nil {
		// CheckURL parsed it already; kept so a change there cannot
		// leave u nil.
		return invalidf("target: url is not a valid URL")
	}
	u := p.u
	if h.policy != nil {
		port := uint16(80)
		if u.Scheme == "https" {
			port = 443
		}
		if err := h.policy.CheckURLHost(u.Host, port); err != nil {
			return Failed(ClassAddressRefused, true, fmt.Errorf("target: %w", err))
		}
	}
	headers := make(map[string]string, len(t.GetHeaders()))
	var used []string
	for k, v := range t.GetHeaders() {
		if !secrets.HasReference(v) {
			headers[k] = v
			continue
		}
		if h.secrets == nil {
			return Failed(ClassSecret, true, fmt.Errorf("target: header %s references a secret, and this worker has no secret source (--secrets-dir)", k))
		}
		// The firing's tenant scopes the lookup: a job names its own
		// tenant's secrets and can never reach another's, even if the api
		// let a reference through.
		x, vals, err := h.secrets.Expand(req.Firing.GetTenant(), v)
		if err != nil {
			return Failed(ClassSecret, true, fmt.Errorf("target: header %s: %w", k, err))
		}
		headers[k] = x
		used = append(used, vals...)
	}
	res := h.do(ctx, req, t.GetMethod(), u, headers)
	if len(used) > 0 {
		// A target that echoes its request (a debugging endpoint, an
		// error page quoting the Authorization header) must not put a
		// secret into the ledger or the logs.
		res.Excerpt = secrets.Redact(res.Excerpt, used)
		if res.Err != nil {
			res.Err = redactedError{msg: secrets.Redact(res.Err.Error(), used), err: res.Err}
		}
	}
	return res
}

func (h *HTTP) do(ctx context.Context, req Request, method string, u *url.URL, headers map[string]string) Result {
	timeout := h.DefaultTimeout
	if d := req.Firing.GetAttemptTimeout(); d != nil && d.AsDuration() > 0 {
		timeout = d.AsDuration()
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	method = strings.ToUpper(method)
	if method == "" {
		method = http.MethodPost
	}
	r, err := newRequest(actx, method, u, req.Firing.GetPayload())
	if err != nil {
		return invalidf("target: build request: %w", err)
	}
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	if r.Header.Get("Content-Type") == "" && len(req.Firing.GetPayload()) > 0 {
		r.Header.Set("Content-Type", "application/octet-stream")
	}
	r.Header.Set("User-Agent", "sundial-worker")
	for _, hd := range SignedHeaders(h.signer, req) {
		r.Header.Set(hd.Name, hd.Value)
	}
	resp, err := h.client.Do(r)
	if err != nil {
		return transportFailure(ctx, actx, fmt.Errorf("target: %s %s: %w", method, u.Redacted(), err))
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
		res.Err = fmt.Errorf("target: %s %s: status %d", method, u.Redacted(), resp.StatusCode)
		res.Class, res.Permanent = ClassifyStatus(resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			res.RetryAfter, res.HasRetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), req.SentAt)
		}
	}
	return res
}

// newRequest is http.NewRequestWithContext for a URL parsed already: the
// same request, without printing u and parsing it again for each firing.
// u is copied, so the shared parsed URL is never changed.
func newRequest(ctx context.Context, method string, u *url.URL, payload []byte) (*http.Request, error) {
	r, err := http.NewRequestWithContext(ctx, method, "", bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	uc := *u
	r.URL = &uc
	r.Host = strings.TrimSuffix(uc.Host, ":")
	return r, nil
}

// ClassifyStatus maps a non-2xx status to its class and whether it is
// permanent: 408 and 429 and every 5xx may succeed later; other 4xx (and a
// redirect, which is not followed) will not.
func ClassifyStatus(status int) (class string, permanent bool) {
	switch {
	case status == http.StatusTooManyRequests:
		return ClassHTTP429, false
	case status == http.StatusRequestTimeout:
		return ClassHTTP4xx, false
	case status >= 500:
		return ClassHTTP5xx, false
	case status >= 400:
		return ClassHTTP4xx, true
	case status >= 300:
		return ClassHTTP3xx, true
	default:
		// 1xx as a final status is a broken server; try again.
		return ClassConnection, false
	}
}

// transportFailure classifies an error that left no response: a refused
// address, the attempt's own timeout, a cancellation from outside
// (fencing, shutdown), or a connection problem.
func transportFailure(parent, attempt context.Context, err error) Result {
	var ne net.Error
	switch {
	case errors.Is(err, netpolicy.ErrRefused):
		return Failed(ClassAddressRefused, true, err)
	case parent.Err() != nil:
		return Failed(ClassCanceled, false, err)
	case errors.Is(attempt.Err(), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return Failed(ClassTimeout, false, err)
	default:
		return Failed(ClassConnection, false, err)
	}
}

// MaxRetryAfter bounds a Retry-After the worker takes into account at all;
// the retry policy caps it further by the job's max delay.
const MaxRetryAfter = 24 * time.Hour

// ParseRetryAfter reads a Retry-After header: delay-seconds or an HTTP-date
// (RFC 9110 §10.2.3), relative to now. A date in the past means no wait.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), MaxRetryAfter), true
}

// redactedError shows a redacted message but keeps the original chain for
// errors.Is/As.
type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }

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
