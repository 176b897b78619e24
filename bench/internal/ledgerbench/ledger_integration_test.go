//go:build integration

package ledgerbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// cassandraPid is the local Cassandra's pid, or 0.
func cassandraPid() int {
	dir := os.Getenv("SUNDIAL_INFRA_DIR")
	if dir == "" {
		root, err := harness.RepoRoot(".")
		if err != nil {
			return 0
		}
		dir = filepath.Join(root, ".infra")
	}
	return harness.ComponentPid(dir, "cassandra")
}

func attempts(job string, i int, fence int64) (running, done *sundialv1.ExecutionAttempt) {
	slot := time.Now().Truncate(time.Second).Add(time.Duration(i) * time.Millisecond)
	base := &sundialv1.ExecutionAttempt{
		ExecutionId:   uuid.NewString(),
		JobId:         job,
		Tenant:        "bench",
		Attempt:       1,
		FenceToken:    fence,
		ScheduledTime: timestamppb.New(slot),
		FireTime:      timestamppb.New(slot),
		StartedTime:   timestamppb.New(slot.Add(time.Millisecond)),
		Lateness:      durationpb.New(time.Millisecond),
		Worker:        "bench-worker",
		JobVersion:    1,
	}
	running = base
	running.Status = sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
	done = proto.Clone(base).(*sundialv1.ExecutionAttempt)
	done.Status = sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED
	done.FinishedTime = timestamppb.New(slot.Add(3 * time.Millisecond))
	done.Duration = durationpb.New(2 * time.Millisecond)
	done.HttpStatus = 200
	return running, done
}

func BenchmarkRecord(b *testing.B) {
	ks := testinfra.CassandraKeyspace(b)
	s, err := ledger.Connect(ledger.ConnectConfig{Hosts: testinfra.CassandraHosts(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := ledger.Migrate(ctx, s, ks, ledger.DefaultReplication); err != nil {
		b.Fatal(err)
	}
	pid := cassandraPid()
	for _, v := range []struct {
		name string
		opts []ledger.WriterOption
	}{
		// The worker writes a record of an attempt that lost (or could
		// not tell whether it kept) its lease with the check, and the
		// records of attempts that held it without (Writer.RecordHeld).
		{"logged+fencecheck", nil},
		{"logged", []ledger.WriterOption{ledger.WithoutFenceCheck()}},
		{"unlogged+fencecheck", []ledger.WriterOption{ledger.WithUnloggedBatch()}},
		{"unlogged", []ledger.WriterOption{ledger.WithUnloggedBatch(), ledger.WithoutFenceCheck()}},
	} {
		for _, conc := range []int{8, 64} {
			b.Run(fmt.Sprintf("%s/writers=%d", v.name, conc), func(b *testing.B) {
				w := ledger.NewWriter(s, ks, v.opts...)
				job := uuid.NewString()
				var next atomic.Int64
				var u0 harness.Usage
				if pid != 0 {
					u0, _ = harness.ReadUsage(pid, false, time.Now())
				}
				b.ResetTimer()
				var wg sync.WaitGroup
				for range conc {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							running, done := attempts(job, int(i), i)
							for _, a := range []*sundialv1.ExecutionAttempt{running, done} {
								if err := w.Record(ctx, a); err != nil {
									b.Error(err)
									return
								}
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				records := float64(2 * b.N)
				b.ReportMetric(records/b.Elapsed().Seconds(), "records/s")
				if pid != 0 {
					if u1, err := harness.ReadUsage(pid, false, time.Now()); err == nil {
						b.ReportMetric(float64(u1.CPU-u0.CPU)/float64(time.Millisecond)/records*1000, "cassandra-cpu-ms/1000records")
					}
				}
			})
		}
	}
}
