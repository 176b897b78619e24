package jobspec

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func rruleSchedule(rule string) *sundialv1.Schedule {
	return &sundialv1.Schedule{Spec: &sundialv1.Schedule_Rrule{Rrule: rule}, Timezone: "Europe/Berlin"}
}

func TestValidateRRule(t *testing.T) {
	j := goodJob()
	j.Schedule = rruleSchedule(" FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,TH;BYHOUR=8;BYMINUTE=0;BYSECOND=0\n")
	if err := Validate(j); err != nil {
		t.Fatal(err)
	}
	Normalize(j)
	if got := j.GetSchedule().GetRrule(); got != "FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,TH;BYHOUR=8;BYMINUTE=0;BYSECOND=0" {
		t.Fatalf("normalized rule %q", got)
	}

	j.Schedule = rruleSchedule("FREQ=MONTHLY;BYSETPOS=2")
	err := Validate(j)
	var jerr *Error
	if !errors.As(err, &jerr) || len(jerr.Violations) != 1 || jerr.Violations[0].Field != "schedule.rrule" ||
		jerr.Violations[0].Description != "BYSETPOS needs another BY rule" {
		t.Fatalf("got %v, want schedule.rrule: BYSETPOS needs another BY rule", err)
	}

	// Whether a leap-day rule with INTERVAL fires depends on DTSTART's
	// year. Without start_time DTSTART is the creation time, unknown to
	// Validate, which leaves "never fires" to FromProto; with start_time
	// Validate decides.
	leap := "FREQ=YEARLY;INTERVAL=4;BYMONTH=2;BYMONTHDAY=29"
	j.Schedule = rruleSchedule(leap)
	if err := Validate(j); err != nil {
		t.Fatalf("without start_time: %v", err)
	}
	if _, err := FromProto(j.Schedule, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)); !errors.As(err, &jerr) ||
		jerr.Violations[0].Field != "schedule.rrule" || !strings.Contains(jerr.Violations[0].Description, "never fires") {
		t.Fatalf("created in 2026: %v", err)
	}
	sch, err := FromProto(j.Schedule, time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sch.Next(time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC)), time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		// DTSTART's time of day: 01:00 in Berlin.
		t.Fatalf("created in 2028: Next = %v, want %v", got, want)
	}
	j.Schedule.StartTime = timestamppb.New(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	if err := Validate(j); err == nil || !strings.Contains(err.Error(), "schedule.rrule: never fires") {
		t.Fatalf("with start_time in 2026: %v", err)
	}
}
