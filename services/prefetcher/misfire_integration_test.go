//go:build integration

package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/prefetcher/internal/slots"
	"github.com/sundialhq/sundial/testkit/pgtest"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// The process stages a 2 s window plus a 2 s chunk: a recovery pass
// stages the on-time slots of both (the chunk up to the job's boundary,
// slots.ChunkEnd).
const testWindow, testChunk = 2 * time.Second, 2 * time.Second

// misfireJob is a per-second job under test with what its policy should do.
type misfireJob struct {
	id    uuid.UUID
	grace time.Duration
	keep  int    // missed slots replayed
	why   string // reason of a slot the policy skipped
	gtext string // the grace as the reason writes it
}

func (j misfireJob) expect(last, now time.Time) (catchUp []time.Time, skipped map[time.Time]string, onTime []time.Time) {
	skipped = map[time.Time]string{}
	lateCut, graceCut := now.Add(-time.Second), now.Add(-j.grace)
	var inGrace []time.Time
	s := last.Add(time.Second)
	for ; s.Before(lateCut); s = s.Add(time.Second) {
		if s.Before(graceCut) {
			skipped[s] = "misfire: older than the grace of " + j.gtext
		} else {
			inGrace = append(inGrace, s)
		}
	}
	cut := max(len(inGrace)-j.keep, 0)
	for _, m := range inGrace[:cut] {
		skipped[m] = j.why
	}
	catchUp = append(catchUp, inGrace[cut:]...)
	// One range of every partition: phase 0.
	end := slots.ChunkEnd(now.Add(testWindow), testChunk, 0)
	for ; !s.After(end); s = s.Add(time.Second) {
		onTime = append(onTime, s)
	}
	return catchUp, skipped, onTime
}

type stagedRow struct {
	scheduled, fire time.Time
	catchUp         bool
	staged          time.Time
}

func staged(t *testing.T, pool *pgxpool.Pool, job uuid.UUID) []stagedRow {
	t.Helper()
	r, err := pool.Query(context.Background(), `SELECT scheduled_at, fire_at, catch_up, envelope FROM outbox WHERE job_id = $1 ORDER BY scheduled_at`, job)
	require.NoError(t, err)
	rows, err := pgx.CollectRows(r, func(row pgx.CollectableRow) (stagedRow, error) {
		var s stagedRow
		var env []byte
		if err := row.Scan(&s.scheduled, &s.fire, &s.catchUp, &env); err != nil {
			return s, err
		}
		f, err := firing.Decode(env)
		if err != nil {
			return s, err
		}
		if f.GetCatchUp() != s.catchUp {
			return s, fmt.Errorf("envelope catch_up %v, row %v", f.GetCatchUp(), s.catchUp)
		}
		s.scheduled, s.fire, s.staged = s.scheduled.UTC(), s.fire.UTC(), f.GetStagedTime().AsTime()
		return s, nil
	})
	require.NoError(t, err)
	return rows
}

// The outage test on the real process: stop the prefetcher for
// longer than its window, start it again, and check for every policy the
// exact slots it replays (catch-up, paced at --catch-up-rate) and the
// exact SKIPPED rows, with reasons, that reach the Cassandra ledger
// through ledger_pending and the drainer.
func TestStoppedPrefetcherCatchesUpByPolicyAndRecordsEverySkippedSlot(t *testing.T) {
	bin := buildBinary(t)
	dsn := pgtest.Schema(t)
	pool := pgtest.Pool(t, dsn)
	_, root := testinfra.ZooKeeper(t)
	election := root + "/election"
	ks := testinfra.CassandraKeyspace(t)
	sess, err := ledger.Connect(ledger.ConnectConfig{Hosts: testinfra.CassandraHosts(t), Timeout: 30 * time.Second})
	require.NoError(t, err)
	t.Cleanup(sess.Close)
	mctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, ledger.Migrate(mctx, sess, ks, "")) // the api's job in production
	reader := ledger.NewReader(sess, ks)

	anchor := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(action sundialv1.MisfireAction, grace time.Duration, maxCatchUp int32, keep int, gtext, why string) misfireJob {
		id := pgtest.InsertJob(t, pool, &sundialv1.Job{
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(time.Second)}, StartTime: timestamppb.New(anchor)},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/x"}}},
			Misfire:  &sundialv1.MisfirePolicy{Action: action, Grace: durationpb.New(grace), MaxCatchUp: maxCatchUp},
		}, `date_trunc('second', now()) + interval '1 second'`)
		return misfireJob{id: id, grace: grace, keep: keep, why: why, gtext: gtext}
	}
	jobs := []misfireJob{
		mk(sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, 4*time.Second, 0, 0, "4s", "misfire: policy SKIP replays no missed slot"),
		mk(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, 4*time.Second, 0, 1, "4s", "misfire: policy RUN_ONCE replays only the most recent missed slot"),
		mk(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, 4*time.Second, 2, 2, "4s", "misfire: policy RUN_ALL replays only the 2 most recent missed slots"),
		mk(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, time.Hour, 3, 3, "1h", "misfire: policy RUN_ALL replays only the 3 most recent missed slots"),
	}
	// One range (--ranges 1, a single leader): its catch-up pacing is one
	// schedule at the whole --catch-up-rate, which the replay instants
	// below are checked against (N ranges pace each range at its share;
	// ranges_integration_test).
	args := []string{
		"--ranges", "1",
		"--window", testWindow.String(), "--chunk", testChunk.String(), "--tick", "200ms", "--misfire-threshold", "1s", "--catch-up-rate", "2",
		"--cassandra-hosts", strings.Join(testinfra.CassandraHosts(t), ","), "--cassandra-keyspace", ks,
		"--ledger-drain-interval", "100ms",
	}

	first := startProc(t, bin, "before", dsn, election, args...)
	require.Eventually(t, func() bool {
		for _, j := range jobs {
			if len(staged(t, pool, j.id)) < 3 {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "the first process never staged")
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGTERM))
	<-first.done
	last := map[uuid.UUID]time.Time{}
	var lastOfAll time.Time
	for _, j := range jobs {
		rows := staged(t, pool, j.id)
		last[j.id] = rows[len(rows)-1].scheduled
		if last[j.id].After(lastOfAll) {
			lastOfAll = last[j.id]
		}
		for _, r := range rows {
			require.False(t, r.catchUp, "no outage yet")
		}
	}

	// The outage: ten seconds of the database clock past the last staged
	// slot, far longer than the 2 s window.
	require.Eventually(t, func() bool {
		var now time.Time
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT now()`).Scan(&now))
		return now.After(lastOfAll.Add(10 * time.Second))
	}, 60*time.Second, 100*time.Millisecond)

	second := startProc(t, bin, "after", dsn, election, args...)
	require.Eventually(t, func() bool {
		for _, j := range jobs {
			rows := staged(t, pool, j.id)
			if !rows[len(rows)-1].scheduled.After(last[j.id].Add(12 * time.Second)) {
				return false
			}
		}
		var pending int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM ledger_pending`).Scan(&pending))
		return pending == 0
	}, 60*time.Second, 50*time.Millisecond, "the restarted process did not catch up and drain")
	v := second.metric(t, `sundial_prefetcher_slots_skipped_total{reason="policy"}`)
	require.NotEmpty(t, v)
	require.NotEqual(t, "0", v)
	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	<-second.done

	var recovery time.Time // the recovery pass's database clock
	var catchUps []stagedRow
	for i, j := range jobs {
		rows := staged(t, pool, j.id)
		var after []stagedRow
		for _, r := range rows {
			if r.scheduled.After(last[j.id]) {
				after = append(after, r)
			}
		}
		now := after[0].staged
		if i == 0 {
			recovery = now
		}
		require.True(t, now.Equal(recovery), "one recovery pass staged every job")
		wantCatch, wantSkipped, wantOn := j.expect(last[j.id], now)
		var gotCatch, gotOn []time.Time
		for _, r := range after {
			switch {
			case r.catchUp:
				gotCatch = append(gotCatch, r.scheduled)
				catchUps = append(catchUps, r)
			case r.staged.Equal(now):
				gotOn = append(gotOn, r.scheduled)
			}
		}
		require.Equal(t, wantCatch, gotCatch, "job %d: catch-up slots", i)
		require.Equal(t, wantOn, gotOn, "job %d: slots staged on time by the recovery pass", i)
		require.NotEmpty(t, wantSkipped, "job %d: the outage skipped slots", i)

		recorded, _, err := reader.ListByJob(context.Background(), j.id.String(), ledger.MaxPageSize, "")
		require.NoError(t, err)
		got := map[time.Time]string{}
		for _, a := range recorded {
			require.Equal(t, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, a.GetStatus())
			require.Equal(t, firing.ExecutionID(j.id, a.GetScheduledTime().AsTime()).String(), a.GetExecutionId())
			got[a.GetScheduledTime().AsTime().UTC()] = a.GetReason()
		}
		require.Equal(t, wantSkipped, got, "job %d: skipped slots in the ledger", i)
	}

	// 1+2+3 catch-ups, released 500 ms apart from the recovery pass's clock.
	require.Len(t, catchUps, 6)
	sort.Slice(catchUps, func(a, b int) bool { return catchUps[a].fire.Before(catchUps[b].fire) })
	for i, c := range catchUps {
		require.True(t, c.fire.Equal(recovery.Add(time.Duration(i)*500*time.Millisecond).Round(time.Microsecond)),
			"catch-up %d fires at %s, want recovery %s + %d×500ms", i, c.fire, recovery, i)
	}
}
