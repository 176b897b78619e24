//go:build e2e

package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/sundialhq/sundial/testkit/harness"
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

// sink is the target every job of a test fires: testkit/harness's recording
// HTTP server, which can also read a Kafka topic.
type sink struct{ *harness.Sink }

// newSink starts a sink verifying each delivery with its tenant's own
// signing key, as the tenant's target would.
func newSink(t *testing.T, p *platform) *sink {
	keys, err := p.plat.Namespace().SigningKeys()
	if err != nil {
		t.Fatal(err)
	}
	s, err := harness.NewSink(keys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("sink: %v", err)
		}
	})
	return &sink{s}
}

func (s *sink) url() string { return s.URL() }

// snapshot copies what arrived so far, by execution id.
func (s *sink) snapshot() (map[string][]delivery, int) {
	m := map[string][]delivery{}
	total := 0
	for id, ds := range s.ByExecution() {
		for _, d := range ds {
			m[id.String()] = append(m[id.String()], delivery{
				via: d.Via.String(), execID: d.ExecutionID.String(), jobID: d.JobID.String(),
				scheduled: d.Scheduled, received: d.Received, fence: d.Fence, attempt: int(d.Attempt),
				catchUp: d.CatchUp, sigErr: d.Err,
			})
			total++
		}
	}
	return m, total
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
	s := harness.Summarize(ls)
	if s.N == 0 {
		return "no deliveries"
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("n=%d p50=%s p90=%s p99=%s max=%s", s.N, r(s.P50), r(s.P90), r(s.P99), r(s.Max))
}
