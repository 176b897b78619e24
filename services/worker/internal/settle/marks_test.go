package settle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/lease"
)

// redisFinisher is Redis's marker call; down makes it fail as an outage
// would.
type redisFinisher struct {
	mu      sync.Mutex
	down    bool
	written []string
}

func (f *redisFinisher) FinishMany(_ context.Context, batch []lease.Finish) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errors.New("redis: connection refused")
	}
	for _, m := range batch {
		f.written = append(f.written, m.Execution.ExecutionID)
	}
	return nil
}

func (f *redisFinisher) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func (f *redisFinisher) snapshot() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.written...)
}

func finish(ids ...string) []lease.Finish {
	var out []lease.Finish
	for _, id := range ids {
		out = append(out, lease.Finish{Execution: lease.Execution{JobID: "j", ExecutionID: id, Attempt: 1}, Mark: lease.FinishDone})
	}
	return out
}

// A Redis outage neither loses a marker nor holds up the writer's caller:
// the markers wait, their executions are pending meanwhile, later markers
// queue behind them, and all are written, oldest first, when Redis answers
// again.
func TestMarksWaitForRedisWithoutBlocking(t *testing.T) {
	fin := &redisFinisher{}
	m := NewMarks(fin, MarksConfig{Retry: time.Millisecond, MaxRetry: 5 * time.Millisecond}, clock.Real{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	ctx := context.Background()

	if !m.Write(ctx, finish("a"), nil) {
		t.Fatal("Redis up: the marker was not written at once")
	}
	fin.setDown(true)
	written := make(chan string, 2)
	if m.Write(ctx, finish("b", "c"), func() { written <- "b,c" }) {
		t.Fatal("Redis down: Write reported the markers written")
	}
	if m.Write(ctx, finish("d"), func() { written <- "d" }) {
		t.Fatal("a marker behind waiting ones was reported written")
	}
	for _, id := range []string{"b", "c", "d"} {
		if !m.Pending(id) {
			t.Fatalf("%s is not pending while its marker waits", id)
		}
	}
	if m.Pending("a") {
		t.Fatal("a written marker is pending")
	}
	select {
	case w := <-written:
		t.Fatalf("%s reported written while Redis is down", w)
	default:
	}

	fin.setDown(false)
	if got := <-written; got != "b,c" {
		t.Fatalf("first written %s, want b,c (oldest first)", got)
	}
	if got := <-written; got != "d" {
		t.Fatalf("then %s, want d", got)
	}
	ids := fin.snapshot()
	if want := []string{"a", "b", "c", "d"}; len(ids) != 4 || ids[1] != "b" || ids[3] != "d" {
		t.Fatalf("written %v, want %v", ids, want)
	}
	for _, id := range []string{"b", "c", "d"} {
		if m.Pending(id) {
			t.Fatalf("%s still pending after its marker was written", id)
		}
	}
	if m.Waiting() != 0 {
		t.Fatalf("%d markers still waiting", m.Waiting())
	}
}
