//go:build integration

package main_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// A worker whose Cassandra is down (nothing listens at its address) still
// starts: it says so in its log and its ledger readiness check, fires its
// firings, and spills their records whole to ledger_pending, where the
// prefetcher's drainer will find them.
func TestWorkerStartsAndSpillsWhileCassandraIsDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	cfg := e.config("w1")
	cfg.CassandraHosts = "127.0.0.1:1"
	cfg.LedgerMigrate = true   // must not hold the start up either
	w := e.startInProcess(cfg) // fails the test if New or Start fails

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Checks["cassandra"](ctx); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("cassandra readiness: %v, want not ready, naming the address", err)
	} else if !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("cassandra readiness: %v, want ledger.ErrUnavailable", err)
	}
	if err := w.Checks["redis"](ctx); err != nil {
		t.Fatalf("redis readiness: %v: only the ledger is down", err)
	}
	if !strings.Contains(e.logs.String(), "cassandra not reachable") {
		t.Fatalf("the log does not say the ledger is down:\n%s", tail(e.logs.String(), 2000))
	}

	due := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	var fs []*sundialv1.Firing
	var ids []string
	for range 5 {
		f := e.firing(uuid.Must(uuid.NewV7()), due, sundialv1.Priority_PRIORITY_MEDIUM)
		fs = append(fs, f)
		ids = append(ids, f.GetExecutionId())
	}
	e.produce(fs, nil)
	eventually(t, 60*time.Second, "every firing at its target", func() bool {
		for _, f := range fs {
			if len(e.sink.ofJob(f.GetJobId())) != 1 {
				return false
			}
		}
		return true
	})
	eventually(t, 60*time.Second, "every record spilled whole to ledger_pending", func() bool {
		var n int
		err := e.pg.QueryRow(context.Background(),
			`SELECT count(DISTINCT execution_id) FROM ledger_pending WHERE execution_id::text = ANY($1) AND record IS NOT NULL AND status = $2`,
			ids, firing.ExecutionStatusSQL(sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED)).Scan(&n)
		if err != nil {
			t.Logf("ledger_pending: %v", err)
		}
		return n == len(ids)
	})
	if err := w.Checks["cassandra"](ctx); err == nil {
		t.Fatal("cassandra readiness passed with nothing listening")
	}
}
