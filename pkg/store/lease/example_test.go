package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/store/lease"
)

// A worker decides whether to fire one delivery of an execution, fires with
// the fence token, and marks the execution done so redeliveries are dropped.
func ExampleStore_Acquire() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	store := lease.New(rdb, lease.WithPrefix("sundial:"))
	ctx := context.Background()

	ex := lease.Execution{JobID: "0193c3f4-…", ExecutionID: "5f1e…", Attempt: 1, Version: 3,
		Overlap: lease.OverlapSkip, FirstAttempt: 1}
	holder := "worker-7/delivery-42" // unique per delivery
	res, err := store.Acquire(ctx, ex, holder, 10*time.Second)
	if err != nil {
		return // Redis unreachable: leave the firing held and try again
	}
	switch res.Outcome {
	case lease.Acquired:
		fmt.Println("fire with fence", res.Fence)
		// ... call the target, renewing for long attempts ...
		_ = store.MarkDone(ctx, ex, holder, 7*24*time.Hour)
	case lease.Held:
		fmt.Println("another delivery is firing it; look again in", res.HeldFor)
	case lease.Waiting:
		fmt.Println("execution", res.Running, "of the job runs; look again in", res.HeldFor)
	case lease.Overlapping:
		fmt.Println("skip: execution", res.Running, "of the job is still running")
	case lease.Poison:
		fmt.Println("dead-letter it: taken", res.Deliveries, "times without finishing")
		_ = store.MarkAttemptDone(ctx, ex, holder, 7*24*time.Hour)
	case lease.AlreadyDone, lease.Stale:
		fmt.Println("drop:", res.Outcome)
	}
}
