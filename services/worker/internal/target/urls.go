package target

import (
	"net/url"
	"strings"
	"sync"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
)

// parsedURL is what the firing path derives from a job's target URL.
type parsedURL struct {
	// checkErr is the api's rule for a job's URL (jobspec.CheckURL).
	checkErr error
	// u is the parsed URL, nil when it does not parse. Shared: copy it
	// before changing it.
	u *url.URL
	// host is u's host (and port) lower-cased, "" when it does not parse,
	// as firing.TargetHost says it: the key of the per-host limits and
	// breakers.
	host string
}

// urlCache remembers parsedURL per URL. A worker fires the same few URLs
// thousands of times a second, and each firing parsed its URL five times
// (the URL check, the limits' host twice, the attempt, and net/http again
// from its text), which was about 4 % of the worker's CPU on time.
// Bounded: past maxURLs distinct URLs it starts over, so a fleet of
// distinct URLs costs a parse each, as before.
type urlCache struct {
	mu   sync.RWMutex
	urls map[string]parsedURL
}

// maxURLs bounds the URLs remembered.
const maxURLs = 4096

// urls is the process's cache: what it holds derives from the URL string
// alone, so one per process is all there can be.
var urls = &urlCache{urls: map[string]parsedURL{}}

// get returns raw's parsedURL, parsing it on first use.
func (c *urlCache) get(raw string) parsedURL {
	c.mu.RLock()
	p, ok := c.urls[raw]
	c.mu.RUnlock()
	if ok {
		return p
	}
	p = parseURL(raw)
	c.mu.Lock()
	if len(c.urls) >= maxURLs {
		clear(c.urls)
	}
	c.urls[raw] = p
	c.mu.Unlock()
	return p
}

func parseURL(raw string) parsedURL {
	p := parsedURL{checkErr: jobspec.CheckURL(raw)}
	if u, err := url.Parse(raw); err == nil {
		p.u, p.host = u, strings.ToLower(u.Host)
	}
	return p
}
