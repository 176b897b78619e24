//go:build integration

package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// The batch calls on every backend they run on: one Redis (one script call
// per batch), one Redis with the batch split by slot as on a cluster (the
// pipelined path on one node), and the local Redis Cluster of three
// primaries (deploy/local/cluster/redis.sh), where the batch's entries
// span most of the slots of every primary.
func TestBatchSpanningSlots(t *testing.T) {
	for _, backend := range []struct {
		name string
		open func(t *testing.T) (*lease.Store, redis.Cmdable)
	}{
		{"redis", func(t *testing.T) (*lease.Store, redis.Cmdable) {
			rdb, prefix := testinfra.Redis(t)
			return lease.New(rdb, lease.WithPrefix(prefix)), rdb
		}},
		{"redis-split-by-slot", func(t *testing.T) (*lease.Store, redis.Cmdable) {
			rdb, prefix := testinfra.Redis(t)
			s := lease.New(rdb, lease.WithPrefix(prefix))
			lease.SplitBySlot(s)
			return s, rdb
		}},
		{"redis-cluster", func(t *testing.T) (*lease.Store, redis.Cmdable) {
			rdb, prefix := testinfra.RedisCluster(t)
			return lease.New(rdb, lease.WithPrefix(prefix)), rdb
		}},
	} {
		t.Run(backend.name, func(t *testing.T) {
			s, rdb := backend.open(t)
			checkBatchSpanningSlots(t, s, rdb)
		})
	}
}

func checkBatchSpanningSlots(t *testing.T, s *lease.Store, rdb redis.Cmdable) {
	ctx := context.Background()
	const jobs = 300
	var batch []lease.Acquisition
	slots := map[int]bool{}
	for j := range jobs {
		e := ex(fmt.Sprintf("job-%d", j), fmt.Sprintf("exec-%d", j), 1, 1)
		batch = append(batch, lease.Acquisition{Execution: e, Holder: fmt.Sprintf("w/%d", j), TTL: time.Minute})
		slots[lease.KeySlot(s.Keys(e.JobID, e.ExecutionID).Lease)] = true
	}
	// A second execution of job-0 at the end: decided after the first,
	// so it gets a larger fence, wherever the rest of the batch went.
	batch = append(batch, lease.Acquisition{Execution: ex("job-0", "exec-again", 1, 1), Holder: "w/again", TTL: time.Minute})
	if len(slots) < jobs*9/10 {
		t.Fatalf("the batch spans %d slots; the test wants nearly one per job", len(slots))
	}

	res, err := s.AcquireMany(ctx, batch)
	if err != nil {
		t.Fatalf("acquire %d across %d slots: %v", len(batch), len(slots), err)
	}
	for i, r := range res {
		if r.Outcome != lease.Acquired || r.Fence <= 0 {
			t.Fatalf("entry %d (%s): %+v, want acquired with a fence", i, batch[i].Execution.ExecutionID, r)
		}
	}
	if res[jobs].Fence <= res[0].Fence {
		t.Errorf("job-0's second execution in the batch: fence %d, not above the first's %d", res[jobs].Fence, res[0].Fence)
	}
	// The results are each entry's own: another delivery is held off
	// every lease, and the lease key holds the entry's holder.
	others := make([]lease.Acquisition, jobs)
	for i := range others {
		others[i] = batch[i]
		others[i].Holder = fmt.Sprintf("other/%d", i)
	}
	held, err := s.AcquireMany(ctx, others)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range held {
		if r.Outcome != lease.Held {
			t.Fatalf("another delivery of %s: %v, want held", batch[i].Execution.ExecutionID, r.Outcome)
		}
	}
	for _, i := range []int{0, 1, jobs / 2, jobs - 1} {
		e := batch[i].Execution
		if h, err := rdb.Get(ctx, s.Keys(e.JobID, e.ExecutionID).Lease).Result(); err != nil || h != batch[i].Holder {
			t.Errorf("lease of %s holds %q (%v), want %q", e.ExecutionID, h, err, batch[i].Holder)
		}
	}

	// Renewed in one batch across the slots: each entry answered as its
	// own (renewed, another's, never leased), and the renewed leases
	// last the new TTL.
	renew := make([]lease.Renewal, 0, jobs+2)
	for i := range jobs {
		renew = append(renew, lease.Renewal{Execution: batch[i].Execution, Holder: batch[i].Holder, TTL: 2 * time.Minute})
	}
	renew = append(renew,
		lease.Renewal{Execution: batch[1].Execution, Holder: "other/1", TTL: time.Minute},
		lease.Renewal{Execution: ex("job-none", "exec-never", 1, 1), Holder: "w/none", TTL: time.Minute})
	answers, err := s.RenewMany(ctx, renew)
	if err != nil {
		t.Fatalf("renew %d across the slots: %v", len(renew), err)
	}
	for i := range jobs {
		if answers[i] != nil {
			t.Fatalf("renewal of %s by its holder: %v", renew[i].Execution.ExecutionID, answers[i])
		}
	}
	if !errors.Is(answers[jobs], lease.ErrFenced) {
		t.Errorf("renewal by another holder: %v, want ErrFenced", answers[jobs])
	}
	if !errors.Is(answers[jobs+1], lease.ErrLost) {
		t.Errorf("renewal of a lease never taken: %v, want ErrLost", answers[jobs+1])
	}
	for _, i := range []int{0, jobs / 2, jobs - 1} {
		e := batch[i].Execution
		if ttl := rdb.PTTL(ctx, s.Keys(e.JobID, e.ExecutionID).Lease).Val(); ttl < 90*time.Second {
			t.Errorf("lease of %s: PTTL %s after renewing to 2 min", e.ExecutionID, ttl)
		}
	}

	// Thirds: marked done, released unstarted, cancelled.
	var finish []lease.Finish
	var release []lease.Release
	for i := range jobs {
		switch i % 3 {
		case 0:
			finish = append(finish, lease.Finish{Execution: batch[i].Execution, Holder: batch[i].Holder, TTL: time.Hour, Mark: lease.FinishDone})
		case 1:
			release = append(release, lease.Release{Execution: batch[i].Execution, Holder: batch[i].Holder, Unstarted: true})
		}
	}
	if err := s.FinishMany(ctx, finish); err != nil {
		t.Fatalf("finish %d: %v", len(finish), err)
	}
	released, err := s.ReleaseMany(ctx, release)
	if err != nil {
		t.Fatalf("release %d: %v", len(release), err)
	}
	for i, ok := range released {
		if !ok {
			t.Errorf("release of %s: the holder no longer had it", release[i].Execution.ExecutionID)
		}
	}
	for i := 2; i < jobs; i += 3 {
		e := batch[i].Execution
		// Released first, so the cancel finds it pending.
		if _, err := s.ReleaseMany(ctx, []lease.Release{{Execution: e, Holder: batch[i].Holder}}); err != nil {
			t.Fatal(err)
		}
		if st, _, err := s.Cancel(ctx, e.JobID, e.ExecutionID, "alice"); err != nil || st != lease.CancelPending {
			t.Fatalf("cancel %s: %v, %v; want pending", e.ExecutionID, st, err)
		}
	}

	// A redelivery of each, in one batch again: done, free, cancelled.
	again := make([]lease.Acquisition, jobs)
	for i := range again {
		again[i] = batch[i]
		again[i].Holder = fmt.Sprintf("late/%d", i)
	}
	res, err = s.AcquireMany(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	want := []lease.Outcome{lease.AlreadyDone, lease.Acquired, lease.Cancelled}
	for i, r := range res {
		if r.Outcome != want[i%3] {
			t.Errorf("redelivery of %s: %v, want %v", again[i].Execution.ExecutionID, r.Outcome, want[i%3])
		}
		if i%3 == 1 && r.Deliveries != 1 {
			t.Errorf("redelivery of %s released unstarted: %d deliveries counted, want 1", again[i].Execution.ExecutionID, r.Deliveries)
		}
		if i%3 == 2 && r.CancelledBy != "alice" {
			t.Errorf("cancelled %s: by %q, want alice", again[i].Execution.ExecutionID, r.CancelledBy)
		}
	}
}

// A primary of the Redis Cluster is killed (SIGKILL) while a worker leases
// batches spanning every shard; its replica is promoted (cluster-node-timeout,
// 2 s), the client finds the new primary, and the batches succeed again: every
// entry acquired, each job's fence above the one before the kill.
func TestBatchSurvivesClusterPrimaryFailover(t *testing.T) {
	rdb, prefix := testinfra.RedisCluster(t)
	s := lease.New(rdb, lease.WithPrefix(prefix))
	ctx := context.Background()
	const jobs = 200

	fences := make([]int64, jobs)
	round := 0
	lease1 := func() error {
		round++
		batch := make([]lease.Acquisition, jobs)
		for j := range batch {
			batch[j] = lease.Acquisition{Execution: ex(fmt.Sprintf("job-%d", j), fmt.Sprintf("exec-%d-%d", j, round), 1, 1),
				Holder: fmt.Sprintf("w/%d-%d", j, round), TTL: time.Minute}
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		res, err := s.AcquireMany(cctx, batch)
		if err != nil {
			return err
		}
		for j, r := range res {
			if r.Outcome != lease.Acquired {
				t.Fatalf("round %d, %s: %v, want acquired", round, batch[j].Execution.ExecutionID, r.Outcome)
			}
			if r.Fence <= fences[j] {
				t.Fatalf("round %d, job-%d: fence %d, not above the last one %d", round, j, r.Fence, fences[j])
			}
			fences[j] = r.Fence
		}
		return nil
	}
	for range 3 {
		if err := lease1(); err != nil {
			t.Fatalf("before the kill: %v", err)
		}
	}

	// The primary that owns job-0's slot.
	victim := primaryOf(t, rdb, s.Keys("job-0", "").Fence)
	// Its replica must be in sync, or it would not take over ("data too
	// old"): one restarted by the test before may still be loading.
	deadline := time.Now().Add(30 * time.Second)
	for {
		repl, err := victim.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(repl, "state=online") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the primary at %s has no replica in sync: %v\n%s", victim.Options().Addr, err, repl)
		}
		time.Sleep(100 * time.Millisecond)
	}
	info, err := victim.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	pid, conf := infoField(info, "process_id"), infoField(info, "config_file")
	n, err := strconv.Atoi(pid)
	if err != nil || conf == "" {
		t.Fatalf("victim %s: pid %q, config %q", victim.Options().Addr, pid, conf)
	}
	t.Cleanup(func() { restartNode(t, rdb, victim.Options().Addr, conf) })
	if err := syscall.Kill(n, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the primary at %s (pid %d): %v", victim.Options().Addr, n, err)
	}
	t.Logf("killed the primary at %s (pid %d)", victim.Options().Addr, n)
	killed := time.Now()

	failed := 0
	deadline = time.Now().Add(60 * time.Second)
	for {
		err := lease1()
		if err == nil {
			break
		}
		failed++
		if time.Now().After(deadline) {
			t.Fatalf("no batch succeeded within 60 s of the kill (%d failed): %v", failed, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the first whole batch succeeded %s after the kill, after %d failed", time.Since(killed).Round(time.Millisecond), failed)
	if failed == 0 {
		t.Fatal("no batch failed after the primary was killed: the test did not reach the dead node")
	}
	if got := primaryOf(t, rdb, s.Keys("job-0", "").Fence).Options().Addr; got == victim.Options().Addr {
		t.Fatalf("job-0's slot is still served by the killed node %s", got)
	}
	for range 3 {
		if err := lease1(); err != nil {
			t.Fatalf("after the failover: %v", err)
		}
	}
}

// primaryOf is the node client of the primary serving key's slot.
func primaryOf(t *testing.T, rdb *redis.ClusterClient, key string) *redis.Client {
	t.Helper()
	ctx := context.Background()
	rdb.ReloadState(ctx)
	slot := lease.KeySlot(key)
	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" {
		shards, err := rdb.ClusterShards(ctx).Result()
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if int64(slot) < r.Start || int64(slot) > r.End {
					continue
				}
				for _, n := range sh.Nodes {
					if n.Role == "master" && n.Health == "online" {
						addr = fmt.Sprintf("%s:%d", n.IP, n.Port)
					}
				}
			}
		}
		if addr == "" && time.Now().After(deadline) {
			t.Fatalf("no primary serves slot %d: %v", slot, err)
		}
	}
	var node *redis.Client
	err := rdb.ForEachShard(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			node = c
		}
		return nil
	})
	if err != nil || node == nil {
		t.Fatalf("no client of %s: %v", addr, err)
	}
	return node
}

func infoField(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), name+":"); ok {
			return v
		}
	}
	return ""
}

// restartNode starts the killed node again from its own configuration
// (it rejoins as a replica of its promoted one) and waits until it says
// cluster_state:ok, so the cluster is whole for the next test.
func restartNode(t *testing.T, rdb *redis.ClusterClient, addr, conf string) {
	if out, err := exec.Command("redis-server", conf).CombinedOutput(); err != nil {
		t.Errorf("restart the node at %s: %v: %s", addr, err, out)
		return
	}
	node := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = node.Close() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		info, err := node.ClusterInfo(context.Background()).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			// A replica again, and in sync with its primary.
			repl, _ := node.Info(context.Background(), "replication").Result()
			if strings.Contains(repl, "role:slave") && strings.Contains(repl, "master_link_status:up") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("the node at %s did not rejoin within 60 s: %v", addr, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The services' client over the cluster's addresses (lease.NewClient, as
// --redis-addr with several nodes builds it) passes the startup check on
// every node and runs a batch across slots.
func TestNewClientOnTheCluster(t *testing.T) {
	_, prefix := testinfra.RedisCluster(t) // the keys' cleanup
	rdb, err := lease.NewClient(testinfra.RedisClusterAddrs(t), lease.Security{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	if err := lease.Check(ctx, rdb); err != nil {
		t.Fatalf("startup check on the cluster: %v", err)
	}
	s := lease.New(rdb, lease.WithPrefix(prefix))
	batch := make([]lease.Acquisition, 64)
	for i := range batch {
		batch[i] = lease.Acquisition{Execution: ex(fmt.Sprintf("job-%d", i), "exec", 1, 1), Holder: fmt.Sprintf("w/%d", i), TTL: time.Minute}
	}
	res, err := s.AcquireMany(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Outcome != lease.Acquired {
			t.Fatalf("%s: %v, want acquired", batch[i].Execution.JobID, r.Outcome)
		}
	}
}

// PublishVersion on the cluster reaches a subscriber on another node: the
// script's PUBLISH goes over the cluster bus to every node, so the
// workers' version watch (a cluster client's Subscribe) hears every job's
// raise, whichever slot the job is in.
func TestPublishVersionHeardAcrossTheCluster(t *testing.T) {
	rdb, prefix := testinfra.RedisCluster(t)
	s := lease.New(rdb, lease.WithPrefix(prefix))
	ctx := context.Background()
	sub := rdb.Subscribe(ctx, s.VersionsChannel())
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	ch := sub.Channel()
	want := map[string]bool{}
	for i := range 20 {
		job := fmt.Sprintf("job-%d", i)
		want[job] = true
		if err := s.PublishVersion(ctx, job, 2); err != nil {
			t.Fatal(err)
		}
	}
	timeout := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case m := <-ch:
			job, v, ok := lease.Version(m.Payload)
			if !ok || v != 2 {
				t.Fatalf("message %q", m.Payload)
			}
			delete(want, job)
		case <-timeout:
			t.Fatalf("not heard within 10 s: %v", want)
		}
	}
}
