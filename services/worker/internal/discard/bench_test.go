package discard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/holder"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// encodingRecorder stands for the recorder's share of a summary row: it
// encodes the row (what the ledger's write costs this process beyond the
// network) and reports it written at once.
type encodingRecorder struct{ Recorder }

func (encodingRecorder) Final(_ context.Context, a *sundialv1.ExecutionAttempt, _ bool, done func()) bool {
	if _, err := proto.Marshal(a); err != nil {
		panic(err)
	}
	done()
	return true
}

// BenchmarkDropPerFiring is the worker's CPU per dropped firing of a bulk
// delete: 3,000 per-second jobs with two minutes each held (360,000
// firings) beside as many firings of unchanged jobs, all 3,000 announced,
// swept out of the holder, summarized and finished. Reported as ns per
// dropped firing (the target is at most 20,000).
func BenchmarkDropPerFiring(b *testing.B) {
	const jobs, perJob = 3000, 120
	clk := clock.NewFake(t0)
	o := newOwner()
	ids := make([]string, jobs)
	for j := range ids {
		ids[j] = fmt.Sprintf("0192f0c4-6a3e-7c1a-9b1e-%012d", j)
	}
	var dropped int
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		h := holder.New(clk, func(*work.Item) {})
		for s := range perJob {
			for j, id := range ids {
				at := t0.Add(time.Duration(s)*time.Second + time.Duration(j)*time.Microsecond)
				h.Add(item(o, id, 1, at))
				h.Add(item(o, id+"-kept", 1, at))
			}
		}
		s := NewSummarizer(encodingRecorder{}, Config{Linger: time.Second, MaxGroup: 1 << 20}, clk, discardLog)
		w := NewSweeper([]Holder{h}, s, 0, clk, discardLog)
		b.StartTimer()

		for _, id := range ids {
			w.Changed(id, 2)
		}
		dropped += w.Sweep()
		clk.Advance(time.Second)
		s.flush(context.Background())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(dropped), "ns/firing")
	if o.count() != dropped {
		b.Fatalf("finished %d of %d dropped", o.count(), dropped)
	}
}
