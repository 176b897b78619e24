//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/signature"
	"github.com/sundialhq/sundial/pkg/testinfra"
)

// delivery is one request (or record) a target received.
type delivery struct {
	via       string // http or kafka
	execID    string
	jobID     string
	scheduled time.Time
	received  time.Time
	fence     int64
	attempt   int
	catchUp   bool
	sigErr    error
}

// sink is the target every job of a test fires: an HTTP server and a Kafka
// topic reader recording what arrived.
type sink struct {
	secret []byte
	srv    *httptest.Server

	mu     sync.Mutex
	byExec map[string][]delivery
	total  int
}

func newSink(t *testing.T, secret string) *sink {
	s := &sink{secret: []byte(secret), byExec: map[string][]delivery{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) url() string { return s.srv.URL + "/fire" }

func (s *sink) serveHTTP(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	body, _ := io.ReadAll(r.Body)
	get := r.Header.Get
	s.record(delivery{via: "http", received: received}, get, body)
	w.WriteHeader(http.StatusOK)
}

func (s *sink) record(d delivery, get func(string) string, body []byte) {
	d.execID = get(firing.HeaderExecutionID)
	d.jobID = get(firing.HeaderJobID)
	d.scheduled, _ = time.Parse(time.RFC3339Nano, get(firing.HeaderScheduledAt))
	d.fence, _ = strconv.ParseInt(get(firing.HeaderFenceToken), 10, 64)
	d.attempt, _ = strconv.Atoi(get(firing.HeaderAttempt))
	d.catchUp = get(firing.HeaderCatchUp) == "true"
	if get(firing.HeaderIdempotencyKey) != d.execID {
		d.sigErr = fmt.Errorf("Idempotency-Key %q differs from the execution id %q", get(firing.HeaderIdempotencyKey), d.execID)
	} else {
		d.sigErr = signature.Verify(s.secret, get(firing.HeaderSignature), d.execID, body, d.received, 5*time.Minute)
	}
	s.mu.Lock()
	s.byExec[d.execID] = append(s.byExec[d.execID], d)
	s.total++
	s.mu.Unlock()
}

// readKafka records every record of topic until ctx ends.
func (s *sink) readKafka(t *testing.T, ctx context.Context, topic string) (wait func()) {
	cl := testinfra.KafkaClient(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				get := func(k string) string {
					for _, h := range r.Headers {
						if h.Key == k {
							return string(h.Value)
						}
					}
					return ""
				}
				s.record(delivery{via: "kafka", received: time.Now()}, get, r.Value)
			})
		}
	}()
	return func() { <-done }
}

// snapshot copies what arrived so far.
func (s *sink) snapshot() (map[string][]delivery, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string][]delivery, len(s.byExec))
	for k, v := range s.byExec {
		m[k] = slices.Clone(v)
	}
	return m, s.total
}

// has reports whether every id in want arrived at least once.
func (s *sink) has(want map[string]expected) (missing int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range want {
		if len(s.byExec[id]) == 0 {
			missing++
		}
	}
	return missing
}

// percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

// lateness summarises received − scheduled over the first delivery of each
// execution.
func lateness(byExec map[string][]delivery, keep func(delivery) bool) string {
	var ls []time.Duration
	for _, ds := range byExec {
		d := ds[0]
		if keep != nil && !keep(d) {
			continue
		}
		ls = append(ls, d.received.Sub(d.scheduled))
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
	if len(ls) == 0 {
		return "no deliveries"
	}
	return fmt.Sprintf("n=%d p50=%s p90=%s p99=%s max=%s", len(ls),
		percentile(ls, 0.50).Round(10*time.Microsecond), percentile(ls, 0.90).Round(10*time.Microsecond),
		percentile(ls, 0.99).Round(10*time.Microsecond), ls[len(ls)-1].Round(10*time.Microsecond))
}
