//go:build integration

package ledgerbench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// BenchmarkHerd writes herds: `herd` different jobs due in the same second,
// one final (SUCCEEDED) record each — what a worker writes per firing once
// RUNNING is superseded. One op is one record. Variants:
//
//   - legacy: the first layout, one logged two-table batch per record,
//     64 records in flight (the recorder's 16 shards × 4);
//
//   - grouped: ledger.Writer.RecordMany over the whole herd split into
//     `group`-record calls (what the recorder hands it), `callers` calls
//     in flight; held records (no fence read) unless +check; groups of
//     100, 10 and 2 records price what a call costs beyond its records
//     (a recorder at low rates hands over small groups);
//
//   - grouped-noindex: the same without the execution index, to price it.
//
//   - grouped-notenant: the same without the by-tenant copy
//     (executions_by_tenant), to price it. The herd's jobs belong to 16
//     tenants.
//
//   - grouped-columns: the same with each record's fields as columns,
//     as before records were packed into one cell, to price the packing.
//
//     source <(deploy/local/infra.sh env)
//     cd bench && go test -tags integration -run '^$' -bench Herd -benchtime 20000x ./internal/ledgerbench
func BenchmarkHerd(b *testing.B) {
	ks := testinfra.CassandraKeyspace(b)
	s, err := ledger.Connect(ledger.ConnectConfig{Hosts: testinfra.CassandraHosts(b), Timeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := ledger.Migrate(ctx, s, ks, ledger.DefaultReplication); err != nil {
		b.Fatal(err)
	}
	pid := cassandraPid()
	type variant struct {
		name          string
		opts          []ledger.WriterOption
		herd, group   int
		callers       int
		check, legacy bool
	}
	vs := []variant{
		{name: "legacy", opts: []ledger.WriterOption{ledger.WithLegacyLayout()}, herd: 1000, group: 1, callers: 64, legacy: true},
		{name: "grouped", herd: 1000, group: 1000, callers: 2},
		{name: "grouped", herd: 1000, group: 250, callers: 4},
		// Small groups: what the recorder hands the writer at low rates
		// (a group every Quiet of 100 ms), to price a request's own cost.
		{name: "grouped", herd: 1000, group: 100, callers: 2},
		{name: "grouped", herd: 1000, group: 10, callers: 2},
		{name: "grouped", herd: 1000, group: 2, callers: 2},
		{name: "grouped", herd: 4000, group: 4000, callers: 2},
		{name: "grouped+check", herd: 1000, group: 1000, callers: 2, check: true},
		{name: "grouped-noindex", opts: []ledger.WriterOption{ledger.WithoutIndex()}, herd: 1000, group: 1000, callers: 2},
		{name: "grouped-notenant", opts: []ledger.WriterOption{ledger.WithoutTenantCopy()}, herd: 1000, group: 1000, callers: 2},
		{name: "grouped-columns", opts: []ledger.WriterOption{ledger.WithColumnRecords()}, herd: 1000, group: 1000, callers: 2},
	}
	for _, v := range vs {
		b.Run(fmt.Sprintf("%s/herd=%d/group=%d", v.name, v.herd, v.group), func(b *testing.B) {
			w := ledger.NewWriter(s, ks, v.opts...)
			jobs := make([]string, v.herd)
			for i := range jobs {
				jobs[i] = uuid.NewString()
			}
			// The records, built before the clock starts: herd after herd,
			// one second apart.
			base := time.Now().Truncate(time.Second)
			recs := make([]ledger.Rec, b.N)
			for i := range recs {
				slot := base.Add(time.Duration(i/v.herd) * time.Second)
				recs[i] = ledger.Rec{Held: !v.check, Attempt: final(jobs[i%v.herd], fmt.Sprintf("bench-%02d", i%v.herd%16), slot)}
			}
			var u0 harness.Usage
			if pid != 0 {
				u0, _ = harness.ReadUsage(pid, false, time.Now())
			}
			b.ResetTimer()
			work := make(chan []ledger.Rec)
			var wg sync.WaitGroup
			for range v.callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for g := range work {
						for _, err := range w.RecordMany(ctx, g) {
							if err != nil {
								b.Error(err)
								return
							}
						}
					}
				}()
			}
			for i := 0; i < len(recs); i += v.group {
				work <- recs[i:min(i+v.group, len(recs))]
			}
			close(work)
			wg.Wait()
			b.StopTimer()
			records := float64(b.N)
			b.ReportMetric(records/b.Elapsed().Seconds(), "records/s")
			if pid != 0 {
				if u1, err := harness.ReadUsage(pid, false, time.Now()); err == nil {
					b.ReportMetric(float64(u1.CPU-u0.CPU)/float64(time.Millisecond)/records*1000, "cassandra-cpu-ms/1000records")
				}
			}
		})
	}
}

func final(job, tenant string, slot time.Time) *sundialv1.ExecutionAttempt {
	return &sundialv1.ExecutionAttempt{
		ExecutionId:   uuid.NewString(),
		JobId:         job,
		Tenant:        tenant,
		Attempt:       1,
		FenceToken:    slot.UnixMicro(),
		Status:        sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED,
		ScheduledTime: timestamppb.New(slot),
		FireTime:      timestamppb.New(slot),
		StartedTime:   timestamppb.New(slot.Add(time.Millisecond)),
		FinishedTime:  timestamppb.New(slot.Add(3 * time.Millisecond)),
		Lateness:      durationpb.New(time.Millisecond),
		Duration:      durationpb.New(2 * time.Millisecond),
		HttpStatus:    200,
		Worker:        "bench-worker",
		JobVersion:    1,
	}
}
