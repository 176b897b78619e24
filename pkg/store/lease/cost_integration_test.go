//go:build integration

package lease_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// BenchmarkRedisCostPerFiring measures what one firing costs the Redis
// server: its lease taken in a batch of 100 (AcquireMany, as the prepare
// stage does) and its markers written in a batch of 20 (FinishMany, as the
// settle stage does), read from the server's own accounting of the
// scripts' time (INFO commandstats) — the figure the benchmark's
// "redis" CPU column is made of. Other clients of the shared server add to
// it, so run it on a quiet one:
//
//	go test -tags integration -run '^$' -bench RedisCost -benchtime 20000x ./pkg/store/lease
func BenchmarkRedisCostPerFiring(b *testing.B) {
	rdb, prefix := testinfra.Redis(b)
	s := lease.New(rdb, lease.WithPrefix(prefix))
	ctx := context.Background()
	const acquireBatch, finishBatch = 100, 20
	jobs := 1000
	before := scriptMicros(b, rdb)
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(acquireBatch, b.N-done)
		batch := make([]lease.Acquisition, n)
		for i := range batch {
			id := done + i
			batch[i] = lease.Acquisition{
				Execution: lease.Execution{JobID: fmt.Sprintf("job-%d", id%jobs), ExecutionID: fmt.Sprintf("exec-%d", id), Attempt: 1, Version: 1},
				Holder:    "w/" + strconv.Itoa(id), TTL: 5 * time.Second,
			}
		}
		res, err := s.AcquireMany(ctx, batch)
		if err != nil {
			b.Fatal(err)
		}
		for i, r := range res {
			if r.Outcome != lease.Acquired {
				b.Fatalf("entry %d: %v, want acquired", i, r.Outcome)
			}
		}
		for lo := 0; lo < n; lo += finishBatch {
			hi := min(lo+finishBatch, n)
			fin := make([]lease.Finish, 0, hi-lo)
			for _, a := range batch[lo:hi] {
				fin = append(fin, lease.Finish{Execution: a.Execution, Holder: a.Holder, TTL: time.Hour, Mark: lease.FinishDone})
			}
			if err := s.FinishMany(ctx, fin); err != nil {
				b.Fatal(err)
			}
		}
		done += n
	}
	b.StopTimer()
	b.ReportMetric((scriptMicros(b, rdb)-before)/float64(b.N), "redis-µs/firing")
}

// scriptMicros is the server's total time in scripts so far (µs).
func scriptMicros(b *testing.B, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				total += n
			}
		}
	}
	return total
}

// BenchmarkRedisCostPerShed is what one late firing its job's misfire
// policy sheds costs the Redis server, by the way it is shed: leased
// first (AcquireMany, its lease left to run out, as every shed firing
// was) or asked whether any delivery touched it (UntouchedMany, as one
// no delivery touched now is). Batches of 100, fresh executions; the
// server's own accounting of the scripts' time, as
// BenchmarkRedisCostPerFiring:
//
//	go test -tags integration -run '^$' -bench RedisCostPerShed -benchtime 20000x ./pkg/store/lease
func BenchmarkRedisCostPerShed(b *testing.B) {
	rdb, prefix := testinfra.Redis(b)
	s := lease.New(rdb, lease.WithPrefix(prefix))
	ctx := context.Background()
	const batch, jobs = 100, 1000
	for _, how := range []string{"leased", "untouched"} {
		b.Run(how, func(b *testing.B) {
			before := scriptMicros(b, rdb)
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(batch, b.N-done)
				exs := make([]lease.Execution, n)
				acq := make([]lease.Acquisition, n)
				for i := range exs {
					id := done + i
					exs[i] = lease.Execution{JobID: fmt.Sprintf("job-%d", id%jobs), ExecutionID: fmt.Sprintf("%s-exec-%d", how, id), Attempt: 1, Version: 1}
					acq[i] = lease.Acquisition{Execution: exs[i], Holder: "w/" + strconv.Itoa(id), TTL: 5 * time.Second}
				}
				if how == "leased" {
					if _, err := s.AcquireMany(ctx, acq); err != nil {
						b.Fatal(err)
					}
				} else {
					got, err := s.UntouchedMany(ctx, exs)
					if err != nil {
						b.Fatal(err)
					}
					if !got[0] {
						b.Fatal("a fresh execution reported touched")
					}
				}
				done += n
			}
			b.StopTimer()
			b.ReportMetric((scriptMicros(b, rdb)-before)/float64(b.N), "redis-µs/firing")
		})
	}
}
