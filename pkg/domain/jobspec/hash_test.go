package jobspec

import (
	"strings"
	"testing"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// A job's H values resolve from its id: accepted for a new job (no id yet),
// the same instants for the same id wherever the schedule is built, and
// different jobs spread; with no job to hash (a bare schedule), H is
// refused naming the field.
func TestHashedCronResolvesFromTheJobsID(t *testing.T) {
	j := goodJob()
	j.Schedule = &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "H H * * *"}, Timezone: "Europe/Berlin"}
	if err := Validate(j); err != nil {
		t.Fatalf("a new job with H refused: %v", err)
	}
	if !Hashed(j.Schedule) || Hashed(cronSchedule("0 0 * * *")) {
		t.Fatal("Hashed does not tell H apart")
	}
	from := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	first := func(id string) time.Time {
		t.Helper()
		k := goodJob()
		k.Schedule, k.Id = j.Schedule, id
		sch, err := Schedule(k, from)
		if err != nil {
			t.Fatalf("schedule of %s: %v", id, err)
		}
		return sch.Next(from)
	}
	if a, b := first("0190b3a1-0000-7000-8000-000000000001"), first("0190b3a1-0000-7000-8000-000000000001"); !a.Equal(b) {
		t.Fatalf("the same id gave %v and %v", a, b)
	}
	slots := map[time.Time]bool{}
	for i := range 20 {
		slots[first("0190b3a1-0000-7000-8000-0000000000"+string(rune('a'+i))+"0")] = true
	}
	if len(slots) < 15 {
		t.Fatalf("20 jobs with H H * * * share %d slots, want them spread", len(slots))
	}

	if err := ValidateSchedule(j.Schedule); err == nil || !strings.Contains(strings.Join(violations(err), "\n"), "schedule.cron") {
		t.Fatalf("a bare schedule with H: err %v, want refused naming schedule.cron", err)
	}
	if _, err := FromProto(j.Schedule, from); err == nil {
		t.Fatal("FromProto built H without a job")
	}
}
