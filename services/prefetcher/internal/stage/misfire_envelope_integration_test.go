//go:build integration

package stage

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/misfire"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// Every staged firing, on time and catch-up alike, carries its job's
// misfire policy, so a worker reaching it late judges it by that policy;
// a job stored without one stages firings with the defaults filled in.
func TestStagedFiringsCarryTheMisfirePolicy(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	anchor := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	policy := &sundialv1.MisfirePolicy{
		Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: durationpb.New(7 * time.Minute), MaxCatchUp: 4,
	}
	// Behind by ten minutes: the pass stages catch-ups and on-time slots.
	withPolicy := pgtest.InsertJob(t, pool, intervalJob(time.Minute, anchor, policy),
		`date_trunc('minute', now()) - interval '10 minutes'`)
	without := pgtest.InsertJob(t, pool, intervalJob(time.Minute, anchor, nil),
		`date_trunc('minute', now()) + interval '1 minute'`)

	_, err := st.StageBatch(ctx, opts(1))
	require.NoError(t, err)

	rows := stagedRows(t, pool, withPolicy)
	var catchUps int
	for _, r := range rows {
		env, err := firing.Decode(r.envelope)
		require.NoError(t, err)
		require.True(t, proto.Equal(policy, env.GetMisfire()), "slot %s carries %v", r.scheduled, env.GetMisfire())
		if env.GetCatchUp() {
			catchUps++
		}
	}
	require.Equal(t, 4, catchUps, "RUN_ALL with a cap of 4 stages 4 catch-ups")
	require.Greater(t, len(rows), catchUps, "and on-time slots")

	rows = stagedRows(t, pool, without)
	require.NotEmpty(t, rows)
	for _, r := range rows {
		env, err := firing.Decode(r.envelope)
		require.NoError(t, err)
		require.Equal(t, misfire.Policy{Action: misfire.DefaultAction, Grace: misfire.DefaultGrace, MaxCatchUp: misfire.DefaultMaxCatchUp},
			misfire.Of(env.GetMisfire()))
		require.NotNil(t, env.GetMisfire(), "the prefetcher stages the job as normalized")
	}
}
