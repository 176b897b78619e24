package schedule

import (
	"errors"
	"testing"
	"time"
)

var rruleFuzzSeeds = []string{
	"FREQ=MONTHLY;BYDAY=2TU;BYHOUR=9;BYMINUTE=0;BYSECOND=0",
	"FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,TH",
	"FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
	"RRULE:FREQ=YEARLY;BYWEEKNO=20,-1;BYDAY=MO;WKST=SU\nEXDATE:20270517T090000",
	"FREQ=HOURLY;INTERVAL=5;BYHOUR=1,2,3;BYMINUTE=0,30;BYSETPOS=2,-1",
	"FREQ=DAILY;COUNT=5;BYHOUR=2;BYMINUTE=30 RDATE:20270314T023000,20270101T000000Z",
	"FREQ=YEARLY;BYYEARDAY=1,-1,100;UNTIL=20301231",
	"FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;INTERVAL=4",
}

// FuzzParseRRule checks that the rule parser never panics, that every error
// is a *ParseError on rrule, that the canonical form parses back to the same
// schedule, and that Next only moves forward.
func FuzzParseRRule(f *testing.F) {
	for i, s := range rruleFuzzSeeds {
		f.Add(s, uint8(i), uint8(i), uint8(i), int64(1767225600+i*86400*37), int64(1767225600+i*86400*91))
	}
	f.Fuzz(func(t *testing.T, text string, zone, gap, rep uint8, start, from int64) {
		opts := fuzzOptions(zone, gap, rep)
		dtstart := time.Unix(start%(300*365*86400), 0)
		s, err := ParseRRule(text, dtstart, opts)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Field != FieldRRule || pe.Reason == "" {
				t.Fatalf("ParseRRule(%q) returned %T %v, want a *ParseError on rrule with a reason", text, err, err)
			}
			return
		}
		s2, err := ParseRRule(s.String(), dtstart, opts)
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", s.String(), text, err)
		}
		at := time.Unix(from%(300*365*86400), 0)
		prev := at
		for range 5 {
			a, b := s.Next(prev), s2.Next(prev)
			if !a.Equal(b) {
				t.Fatalf("%q and its canonical form %q differ after %v: %v, %v", text, s.String(), prev, a, b)
			}
			if a.IsZero() {
				break
			}
			if !a.After(prev) {
				t.Fatalf("%q: Next(%v) = %v, not after", text, prev, a)
			}
			prev = a
		}
	})
}
