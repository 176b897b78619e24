package schedule_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/schedule"
)

func ExampleParse() {
	ny, _ := time.LoadLocation("America/New_York")
	s, err := schedule.Parse("0 9 * * MON-FRI", schedule.Options{Location: ny})
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Describe())
	fmt.Println(s.String())
	// Friday 2026-03-06 at noon: the next firing is Monday's.
	fmt.Println(s.Next(time.Date(2026, 3, 6, 12, 0, 0, 0, ny)))
	// Output:
	// at 09:00 on Monday through Friday (America/New_York)
	// 0 9 * * 1-5
	// 2026-03-09 09:00:00 -0400 EDT
}

func ExampleParseError() {
	_, err := schedule.Parse("0 0 32 * *", schedule.Options{})
	var pe *schedule.ParseError
	if errors.As(err, &pe) {
		fmt.Println(pe.Field, "|", pe.Token, "|", err)
	}
	// Output:
	// day-of-month | 32 | day-of-month: 32 is out of range 1-31
}

// Example_gap shows the two gap policies on New York's spring-forward night,
// when 02:00-02:59 does not exist on 2026-03-08.
func Example_gap() {
	ny, _ := time.LoadLocation("America/New_York")
	from := time.Date(2026, 3, 7, 12, 0, 0, 0, ny)
	for _, gap := range []schedule.GapPolicy{schedule.GapShift, schedule.GapSkip} {
		s, _ := schedule.Parse("30 2 * * *", schedule.Options{Location: ny, Gap: gap})
		fmt.Println(gap, s.Next(from))
	}
	// Output:
	// SHIFT 2026-03-08 03:00:00 -0400 EDT
	// SKIP 2026-03-09 02:30:00 -0400 EDT
}

// Example_repeat shows the repeat policies on New York's fall-back night,
// when 01:00-01:59 happens twice on 2026-11-01.
func Example_repeat() {
	ny, _ := time.LoadLocation("America/New_York")
	from := time.Date(2026, 10, 31, 12, 0, 0, 0, ny)
	for _, rep := range []schedule.RepeatPolicy{schedule.RepeatFirst, schedule.RepeatLast, schedule.RepeatBoth} {
		s, _ := schedule.Parse("30 1 * * *", schedule.Options{Location: ny, Repeat: rep})
		fmt.Print(rep, ":")
		for t := range schedule.Preview(s, from, 2) {
			fmt.Print(" ", t.Format(time.RFC3339))
		}
		fmt.Println()
	}
	// Output:
	// FIRST: 2026-11-01T01:30:00-04:00 2026-11-02T01:30:00-05:00
	// LAST: 2026-11-01T01:30:00-05:00 2026-11-02T01:30:00-05:00
	// BOTH: 2026-11-01T01:30:00-04:00 2026-11-01T01:30:00-05:00
}

// Example_hourly shows that a schedule matching every hour follows real
// elapsed time through a transition, whatever its policies.
func Example_hourly() {
	ny, _ := time.LoadLocation("America/New_York")
	s, _ := schedule.Parse("*/30 * * * *", schedule.Options{Location: ny, Gap: schedule.GapShift})
	for t := range schedule.Preview(s, time.Date(2026, 3, 8, 1, 0, 0, 0, ny), 3) {
		fmt.Println(t.Format(time.RFC3339))
	}
	// Output:
	// 2026-03-08T01:30:00-05:00
	// 2026-03-08T03:00:00-04:00
	// 2026-03-08T03:30:00-04:00
}

func ExamplePreview() {
	s, _ := schedule.Parse("0 0 L * *", schedule.Options{})
	for t := range schedule.Preview(s, time.Date(2028, 1, 15, 0, 0, 0, 0, time.UTC), 3) {
		fmt.Println(t.Format(time.DateOnly))
	}
	// Output:
	// 2028-01-31
	// 2028-02-29
	// 2028-03-31
}

func ExampleEvery() {
	anchor := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	s, err := schedule.Every(90*time.Minute, anchor, schedule.Options{})
	if err != nil {
		panic(err)
	}
	for t := range schedule.Preview(s, anchor.Add(2*time.Hour), 2) {
		fmt.Println(t.Format(time.RFC3339))
	}
	// Output:
	// 2026-01-01T03:00:10Z
	// 2026-01-01T04:30:10Z
}

// "@every" counts from Options.Start, or from the Unix epoch without one,
// so the firings do not depend on when the schedule was parsed.
func ExampleParse_every() {
	start := time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC)
	s, _ := schedule.Parse("@every 45m", schedule.Options{Start: start})
	for t := range schedule.Preview(s, time.Time{}, 2) {
		fmt.Println(t.Format(time.RFC3339))
	}
	// Output:
	// 2026-05-01T08:00:00Z
	// 2026-05-01T08:45:00Z
}

func ExampleOnce() {
	at := time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)
	s := schedule.Once(at, schedule.Options{})
	fmt.Println(s.Next(at.Add(-time.Hour)))
	fmt.Println(s.Next(at).IsZero())
	// Output:
	// 2026-12-24 18:00:00 +0000 UTC
	// true
}

func ExampleParseGapPolicy() {
	gap, _ := schedule.ParseGapPolicy("skip")
	repeat, _ := schedule.ParseRepeatPolicy("Both")
	fmt.Println(gap, repeat)
	// Output:
	// SKIP BOTH
}
