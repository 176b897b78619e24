//go:build integration

package main_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Done markers live an hour (--done-ttl), not a week. Against the real
// Redis, Kafka, Cassandra and Postgres: three firings fire and are
// recorded; their markers and delivery counters are then gone from Redis,
// as an hour later. Copies of them — two a backfill re-stages under the
// slots' own ids, one redelivered long after it was staged (an offset
// reset) — are answered by the ledger and not fired again; a backfill of a
// slot that never ran, and a fresh firing, fire.
func TestCopiesPastTheMarkersAreAnsweredByTheLedger(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	base := time.Now().Add(3 * time.Second).Truncate(time.Second)
	var ran []*sundialv1.Firing
	for i := range 3 {
		f := e.firing(uuid.Must(uuid.NewV7()), base.Add(time.Duration(i)*100*time.Millisecond), sundialv1.Priority_PRIORITY_HIGH)
		f.StagedTime = timestamppb.New(time.Now())
		f.Origin = sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE
		ran = append(ran, f)
	}
	e.produce(ran, nil)
	e.startInProcess(e.config("w1"))
	eventually(t, 60*time.Second, "the three firings", func() bool { return e.sink.distinct() >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The worker's rows in the ledger: a copy asked about before they land
	// would fire (at least once).
	reader := ledger.NewReader(e.ledger, e.keyspace)
	eventually(t, 30*time.Second, "the three ledger records", func() bool {
		for _, f := range ran {
			rows, _ := reader.GetExecution(ctx, f.GetExecutionId())
			if len(rows) == 0 || rows[0].GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
				return false
			}
		}
		return true
	})
	// Every key of the env's prefix — the markers and delivery counters —
	// gone, as when --done-ttl has passed.
	keys, err := e.rdb.Keys(ctx, e.redisPfx+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no marker keys under the prefix: the test would not test anything")
	}
	if err := e.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}

	again := base.Add(5 * time.Second).Truncate(time.Second)
	copyOf := func(f *sundialv1.Firing, origin sundialv1.FiringOrigin, staged time.Time) *sundialv1.Firing {
		c := proto.Clone(f).(*sundialv1.Firing)
		c.Origin, c.StagedTime, c.FireTime = origin, timestamppb.New(staged), timestamppb.New(again)
		return c
	}
	backfill := sundialv1.FiringOrigin_FIRING_ORIGIN_BACKFILL
	never := e.firing(uuid.Must(uuid.NewV7()), base.Add(-time.Hour), sundialv1.Priority_PRIORITY_HIGH)
	never.Origin, never.StagedTime, never.FireTime = backfill, timestamppb.Now(), timestamppb.New(again)
	fresh := e.firing(uuid.Must(uuid.NewV7()), again, sundialv1.Priority_PRIORITY_HIGH)
	fresh.Origin, fresh.StagedTime = sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE, timestamppb.Now()
	e.produce([]*sundialv1.Firing{
		copyOf(ran[0], backfill, time.Now()), copyOf(ran[1], backfill, time.Now()),
		copyOf(ran[2], sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE, time.Now().Add(-2*time.Hour)),
		never, fresh,
	}, nil)
	eventually(t, 60*time.Second, "the backfill of a slot that never ran and the fresh firing", func() bool { return e.sink.distinct() >= 5 })
	time.Sleep(3 * time.Second) // room for a wrong second delivery of the copies
	count := map[string]int{}
	for _, a := range e.sink.snapshot() {
		count[a.exec]++
	}
	for _, f := range ran {
		if count[f.GetExecutionId()] != 1 {
			t.Errorf("%s delivered %d times, want once: its copy past the markers fired again", f.GetExecutionId(), count[f.GetExecutionId()])
		}
	}
	for _, f := range []*sundialv1.Firing{never, fresh} {
		if count[f.GetExecutionId()] != 1 {
			t.Errorf("%s delivered %d times, want once", f.GetExecutionId(), count[f.GetExecutionId()])
		}
	}
	if n := len(count); n != 5 || slices.ContainsFunc(e.sink.snapshot(), func(a arrival) bool { return a.exec == "" }) {
		t.Errorf("%d executions delivered, want 5", n)
	}
}
