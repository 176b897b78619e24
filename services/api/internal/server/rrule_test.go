package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func rruleJob(rule string) *sundialv1.Job {
	j := validJob()
	j.Schedule = &sundialv1.Schedule{Spec: &sundialv1.Schedule_Rrule{Rrule: rule}, Timezone: "America/New_York"}
	return j
}

// Bad rules are refused naming schedule.rrule and the rule part, before the
// store is reached.
func TestCreateJobRefusesBadRRules(t *testing.T) {
	s := newService(t, untouchable{t: t})
	start := timestamppb.New(time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC))
	for rule, want := range map[string]string{
		"FREQ=MONTHLY;BYSETPOS=-1":                             "BYSETPOS needs another BY rule",
		"FREQ=MINUTELY":                                        "FREQ=MINUTELY is not supported",
		"FREQ=DAILY;COUNT=3;UNTIL=20270101T000000":             "COUNT and UNTIL cannot both be given",
		"FREQ=WEEKLY;BYDAY=2TU":                                "only allowed with FREQ=MONTHLY or YEARLY",
		"FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30":                  "never fires",
		"FREQ=DAILY;BYHOUR=25":                                 `BYHOUR: "25" must be a whole number from 0 to 23`,
		"BYDAY=MO":                                             "FREQ is required",
		"FREQ=DAILY\nEXDATE;TZID=Europe/Paris:20270101T090000": "parameters (TZID, VALUE) are not supported",
		"": "must not be empty",
	} {
		j := rruleJob(rule)
		j.Schedule.StartTime = start
		_, err := s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: j})
		got, ok := violations(t, err)["schedule.rrule"]
		if !ok || !strings.Contains(got, want) {
			t.Errorf("%q: violations %v, want schedule.rrule: ...%s...", rule, violations(t, err), want)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "schedule.rrule: ") {
			t.Errorf("%q: message %q does not name schedule.rrule", rule, msg)
		}
	}
}

// Without start_time, DTSTART is the creation instant by the database
// clock: a rule that never fires from it is refused inside the create
// (nothing is returned to store), one that fires gets its first slot.
func TestCreateJobRRuleFromCreationTime(t *testing.T) {
	dbNow := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	s := newService(t, fixedNowStore{now: dbNow})

	// Every fourth year from 2026 never holds a 29 February.
	_, err := s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: rruleJob("FREQ=YEARLY;INTERVAL=4;BYMONTH=2;BYMONTHDAY=29;BYHOUR=9;BYMINUTE=0;BYSECOND=0")})
	if got := violations(t, err)["schedule.rrule"]; !strings.Contains(got, "never fires") {
		t.Fatalf("never-firing rule: %v", err)
	}

	resp, err := s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: rruleJob("FREQ=MONTHLY;BYDAY=2TU;BYHOUR=9;BYMINUTE=0;BYSECOND=0")})
	if err != nil {
		t.Fatal(err)
	}
	// The second Tuesday of December 2026 at 09:00 in New York (EST).
	if got, want := resp.GetJob().GetNextFireTime().AsTime(), time.Date(2026, 12, 8, 14, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("next_fire_time = %v, want %v", got, want)
	}
}

func TestPreviewScheduleRRule(t *testing.T) {
	s := newService(t, untouchable{t: t})
	resp, err := s.PreviewSchedule(tenantCtx, &sundialv1.PreviewScheduleRequest{
		Schedule: &sundialv1.Schedule{
			Spec:      &sundialv1.Schedule_Rrule{Rrule: "RRULE:FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1\nEXDATE:20270129T180000"},
			Timezone:  "Europe/London",
			StartTime: timestamppb.New(time.Date(2026, 11, 1, 18, 0, 0, 0, time.UTC)),
		},
		From:  timestamppb.New(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)),
		Count: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The last weekday of each month at 18:00 London time, but January's.
	want := []time.Time{
		time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 31, 18, 0, 0, 0, time.UTC),
		time.Date(2027, 2, 26, 18, 0, 0, 0, time.UTC),
		time.Date(2027, 3, 31, 17, 0, 0, 0, time.UTC), // BST
	}
	if len(resp.GetTimes()) != len(want) {
		t.Fatalf("times = %v", resp.GetTimes())
	}
	for i, ts := range resp.GetTimes() {
		if !ts.AsTime().Equal(want[i]) {
			t.Errorf("times[%d] = %v, want %v", i, ts.AsTime(), want[i])
		}
	}
	if !strings.Contains(resp.GetDescription(), "BYSETPOS=-1") {
		t.Errorf("description %q", resp.GetDescription())
	}

	_, err = s.PreviewSchedule(tenantCtx, &sundialv1.PreviewScheduleRequest{
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Rrule{Rrule: "FREQ=WEEKLY;BYWEEKNO=3"}},
	})
	if got := violations(t, err)["schedule.rrule"]; !strings.Contains(got, "BYWEEKNO is only allowed with FREQ=YEARLY") {
		t.Fatalf("preview of a bad rule: %v", err)
	}
}
