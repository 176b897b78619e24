//go:build integration

package ledger_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// An attempt whose RUNNING record was written as columns (before records
// were packed) and whose outcome is packed reads as one record: the
// outcome's fields over the RUNNING ones, by id, by job and by tenant.
func TestPackedRecordsOverColumnRows(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	before, after := ledger.NewWriter(s, ks, ledger.WithColumnRecords()), ledger.NewWriter(s, ks)
	r := ledger.NewReader(s, ks)
	job := uuid.New()
	sched := time.Now().UTC().Truncate(time.Second)

	run := attempt(job, sched, 1, 7, running)
	run.StartedTime = timestamppb.New(sched.Add(251 * time.Millisecond))
	run.Lateness = durationpb.New(1500 * time.Microsecond)
	if err := before.Record(ctx, run); err != nil {
		t.Fatal(err)
	}
	done := attempt(job, sched, 1, 7, failed)
	done.Worker, done.JobVersion = "", 0
	done.FinishedTime = timestamppb.New(sched.Add(300 * time.Millisecond))
	done.HttpStatus, done.Error = 502, "bad gateway"
	if err := after.Record(ctx, done); err != nil {
		t.Fatal(err)
	}
	// A second packed transition of the same attempt keeps the first's
	// fields it does not repeat.
	dead := attempt(job, sched, 1, 7, sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD)
	dead.Worker, dead.JobVersion, dead.Reason = "", 0, "retries exhausted"
	if err := after.Record(ctx, dead); err != nil {
		t.Fatal(err)
	}

	want := proto.Clone(run).(*sundialv1.ExecutionAttempt)
	want.Status = sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD
	want.FinishedTime, want.HttpStatus, want.Error, want.Reason = done.FinishedTime, 502, "bad gateway", "retries exhausted"

	got, err := r.GetExecution(ctx, run.ExecutionId)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !proto.Equal(got[0], want) {
		t.Fatalf("GetExecution:\n got %v\nwant %v", got, want)
	}
	list, _, err := r.ListByJob(ctx, job.String(), 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !proto.Equal(list[0], want) {
		t.Fatalf("ListByJob: %v", list)
	}
	byTenant, _, err := r.ListByTenant(ctx, ledger.TenantQuery{Tenant: "acme", From: sched.Add(-time.Hour), To: sched.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(byTenant) != 1 || !proto.Equal(byTenant[0], want) {
		t.Fatalf("ListByTenant: %v", byTenant)
	}
}

// A packed row writes two cells (the status and its record), whatever
// the record holds: none of the field columns.
func TestPackedRecordWritesNoFieldColumns(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	job := uuid.New()
	sched := time.Now().UTC().Truncate(time.Second)
	a := attempt(job, sched, 1, 3, succeeded)
	a.HttpStatus = 200
	if err := ledger.NewWriter(s, ks).Record(ctx, a); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{ledger.TableAttempts, ledger.TableByTenant} {
		it := s.Iter(ctx, ledger.Statement{CQL: "SELECT status, worker, http_status, parts FROM " + ks + "." + table +
			" WHERE execution_id = ? ALLOW FILTERING", Values: []any{a.ExecutionId}})
		var (
			status     string
			worker     *string
			httpStatus *int32
			parts      map[int][]byte
			rows       int
		)
		for it.Scan(&status, &worker, &httpStatus, &parts) {
			rows++
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		if rows != 1 || status != "EXECUTION_STATUS_SUCCEEDED" || worker != nil || httpStatus != nil || len(parts) != 1 || parts[5] == nil {
			t.Errorf("%s: rows %d status %q worker %v http %v parts %v", table, rows, status, worker, httpStatus, parts)
		}
	}
}
