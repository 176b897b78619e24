//go:build integration

package apitest_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// fixedClock is the real clock reading one instant.
type fixedClock struct {
	clock.Real
	at time.Time
}

func (c fixedClock) Now() time.Time { return c.at }

// The forecast on the real api over real Postgres: it reads the caller's
// tenant's active jobs only (paused and other tenants' left out), finds
// the midnight herd with its jitter-less share and the schedules that make
// it, filters by priority, lets an operator see every tenant, refuses a
// tenant naming another and a bad window naming the field, and answers the
// same over HTTP.
func TestIntegrationForecast(t *testing.T) {
	midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	from := midnight.Add(-30 * time.Minute)
	api := apitest.Start(t, apitest.Options{ForecastClock: fixedClock{at: from.Add(17 * time.Second)}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	acme := sundialv1.NewJobServiceClient(dial(t, api, apitest.TokenAcme))
	globex := sundialv1.NewJobServiceClient(dial(t, api, apitest.TokenGlobex))
	create := func(c sundialv1.JobServiceClient, name, cron string, jitter time.Duration, prio sundialv1.Priority) string {
		t.Helper()
		j := cronJob(name)
		j.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: cron}
		j.MaxJitter, j.Priority = durationpb.New(jitter), prio
		resp, err := c.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: j})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return resp.GetJob().GetId()
	}
	for i := range 120 {
		create(acme, fmt.Sprint("nightly-", i), "0 0 * * *", 0, sundialv1.Priority_PRIORITY_MEDIUM)
	}
	for i := range 10 {
		create(acme, fmt.Sprint("jittered-", i), "0 0 * * *", 30*time.Second, sundialv1.Priority_PRIORITY_LOW)
	}
	create(acme, "quarterly-hour", "*/15 * * * *", 0, sundialv1.Priority_PRIORITY_HIGH)
	paused := create(acme, "paused", "0 0 * * *", 0, sundialv1.Priority_PRIORITY_MEDIUM)
	if _, err := acme.PauseJob(ctx, &sundialv1.PauseJobRequest{Id: paused}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		create(globex, fmt.Sprint("g-", i), "0 0 * * *", 0, sundialv1.Priority_PRIORITY_MEDIUM)
	}

	hour := durationpb.New(time.Hour)
	f, err := sundialv1.NewForecastServiceClient(dial(t, api, apitest.TokenAcme)).GetForecast(ctx, &sundialv1.GetForecastRequest{Window: hour})
	if err != nil {
		t.Fatal(err)
	}
	// 23:30, 23:45, 00:00, 00:15 for the quarter-hour job; 130 at midnight.
	if f.GetJobs() != 131 || f.GetFirings() != 134 || !f.GetFrom().AsTime().Equal(from) || len(f.GetMinutes()) != 60 {
		t.Fatalf("acme: %d jobs, %d firings from %s over %d minutes; want 131, 134, %s, 60", f.GetJobs(), f.GetFirings(), f.GetFrom().AsTime(), len(f.GetMinutes()), from)
	}
	if len(f.GetHerds()) != 1 {
		t.Fatalf("acme: herds %v, want the midnight one", f.GetHerds())
	}
	h := f.GetHerds()[0]
	if !h.GetTime().AsTime().Equal(midnight) || h.GetFirings() != 131 || h.GetNoJitter() != 121 {
		t.Fatalf("herd at %s: %d firings, %d without jitter; want %s, 131, 121", h.GetTime().AsTime(), h.GetFirings(), h.GetNoJitter(), midnight)
	}
	top := h.GetSchedules()[0]
	if top.GetExpression() != "0 0 * * *" || top.GetJobs() != 130 || top.GetNoJitter() != 120 || top.GetSuggestedExpression() != "H 0 * * *" ||
		top.GetSuggestedJitter().AsDuration() != time.Minute || len(top.GetSample()) == 0 || top.GetSample()[0].GetSlot() == "" {
		t.Fatalf("herd schedule %v", top)
	}
	if m := f.GetMinutes()[30]; m != 131 {
		t.Fatalf("minute 30 (midnight) has %d firings, want 131", m)
	}
	if len(f.GetByTenant()) != 1 || f.GetByTenant()[0].GetName() != "acme" {
		t.Fatalf("acme sees tenants %v", f.GetByTenant())
	}

	high, err := sundialv1.NewForecastServiceClient(dial(t, api, apitest.TokenAcme)).GetForecast(ctx, &sundialv1.GetForecastRequest{Window: hour, Priority: sundialv1.Priority_PRIORITY_HIGH})
	if err != nil || high.GetJobs() != 1 || high.GetFirings() != 4 || len(high.GetHerds()) != 0 {
		t.Fatalf("HIGH only: %v %v", high, err)
	}

	all, err := sundialv1.NewForecastServiceClient(dial(t, api, apitest.TokenOperator)).GetForecast(ctx, &sundialv1.GetForecastRequest{Window: hour})
	if err != nil || all.GetJobs() != 181 || len(all.GetHerds()) != 1 || all.GetHerds()[0].GetFirings() != 181 || len(all.GetByTenant()) != 2 {
		t.Fatalf("operator, every tenant: %v %v", all, err)
	}

	_, err = sundialv1.NewForecastServiceClient(dial(t, api, apitest.TokenGlobex)).GetForecast(ctx, &sundialv1.GetForecastRequest{Tenant: "acme"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("globex naming acme: %v, want PermissionDenied", err)
	}
	_, err = sundialv1.NewForecastServiceClient(dial(t, api, apitest.TokenAcme)).GetForecast(ctx, &sundialv1.GetForecastRequest{Window: durationpb.New(90 * time.Second)})
	if !namesField(err, "window") {
		t.Fatalf("a 90s window: %v, want InvalidArgument naming window", err)
	}

	code, _, out := post(t, api, "/v1/forecast?window=3600s&herd_threshold=200", apitest.TokenAcme, nil)
	if code != http.StatusOK || out["firings"] != "134" || out["herds"] != nil {
		t.Fatalf("GET /v1/forecast: %d %v", code, out)
	}
}

// namesField says whether err is InvalidArgument with a BadRequest naming
// field.
func namesField(err error, field string) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return false
	}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == field {
					return true
				}
			}
		}
	}
	return false
}
