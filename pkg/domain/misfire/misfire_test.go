package misfire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestOfFillsTheDefaultsAndKeepsWhatIsSet(t *testing.T) {
	require.Equal(t, Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, Grace: time.Hour, MaxCatchUp: 10}, Of(nil))
	p := Of(&sundialv1.MisfirePolicy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: durationpb.New(0), MaxCatchUp: 3})
	require.Equal(t, Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: 0, MaxCatchUp: 3}, p,
		"a grace of zero is a grace, not unset")
}

func TestKeepByAction(t *testing.T) {
	for action, want := range map[sundialv1.MisfireAction]int{
		sundialv1.MisfireAction_MISFIRE_ACTION_SKIP:        0,
		sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE:    1,
		sundialv1.MisfireAction_MISFIRE_ACTION_UNSPECIFIED: 1,
		sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL:     7,
	} {
		require.Equal(t, want, Of(&sundialv1.MisfirePolicy{Action: action, MaxCatchUp: 7}).Keep(), action.String())
	}
}

func TestReasons(t *testing.T) {
	p := Of(&sundialv1.MisfirePolicy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, Grace: durationpb.New(90 * time.Minute)})
	require.Equal(t, "misfire: older than the grace of 1h30m", p.Reason(Expired))
	require.Equal(t, "misfire: policy SKIP replays no missed slot", p.Reason(NotReplayed))
	s := Summary{First: time.Date(2030, 6, 1, 9, 0, 0, 0, time.UTC), Last: time.Date(2030, 6, 1, 10, 0, 0, 0, time.UTC), Expired: 2, Policy: 3, AtLeast: true}
	require.Equal(t, "misfire: at least 5 slots from 2030-06-01T09:00:00Z to 2030-06-01T10:00:00Z skipped"+
		" (only the most recent are recorded one by one): 2 older than the grace of 1h30m; 3 not replayed by policy SKIP", p.SummaryReason(s))
	s.AtLeast = false
	require.Equal(t, "misfire: 5 slots from 2030-06-01T09:00:00Z to 2030-06-01T10:00:00Z reached the worker late and were skipped:"+
		" 2 older than the grace of 1h30m; 3 not replayed by policy SKIP", p.LateSummaryReason(s))
}
