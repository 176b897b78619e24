package ledger_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// A worker records an attempt when it takes the lease and again with the
// outcome; the api lists a job's history a page at a time. (Not run: it
// needs a Cassandra node.)
func Example() {
	ctx := context.Background()
	s, err := ledger.Connect(ledger.ConnectConfig{Hosts: []string{"127.0.0.1:9042"}})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	s = ledger.Instrumented(ledger.Retrying(s, ledger.DefaultRetryPolicy), prometheus.NewRegistry())
	if err := ledger.Migrate(ctx, s, "sundial", ledger.DefaultReplication); err != nil {
		log.Fatal(err)
	}

	w := ledger.NewWriter(s, "sundial")
	slot := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	a := &sundialv1.ExecutionAttempt{
		ExecutionId: "0b7c…", JobId: "0192…", Attempt: 1, FenceToken: 1_772_000_000_000_001,
		Status:        sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
		ScheduledTime: timestamppb.New(slot), FireTime: timestamppb.New(slot),
	}
	if err := w.Record(ctx, a); errors.Is(err, ledger.ErrFenced) {
		return // another worker holds the attempt now: drop the result
	}
	a.Status = sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED
	a.HttpStatus = 200
	_ = w.Record(ctx, a)

	r := ledger.NewReader(s, "sundial")
	page, next, err := r.ListByJob(ctx, "0192…", 50, "")
	_, _, _ = page, next, err
}
