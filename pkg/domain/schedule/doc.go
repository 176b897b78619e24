// Package schedule decides every instant at which Sundial fires a job: cron
// expressions (with Quartz's extensions), fixed intervals and one-off
// instants, evaluated in the job's IANA time zone with a per-schedule
// daylight-saving policy.
//
// # Expressions
//
// Parse reads five fields (minute hour day-of-month month day-of-week) or six
// (a leading second field). Each field is "*", a number, a name (JAN-DEC,
// SUN-SAT, any case), a range "a-b", a step "*/n", "a-b/n" or "a/n" (a
// through the end of the field), or a comma-separated list of those.
// Day-of-week runs 0-7 with both 0 and 7 meaning Sunday. Ranges do not wrap
// around: "FRI-MON" is an error; write "FRI-SAT,SUN-MON".
//
// When both day-of-month and day-of-week are restricted, a day matches if
// either matches, as in classic cron; a day field written "*" or "?" is
// unrestricted and the other field alone decides. A stepped star such as
// "*/2" is a restriction.
//
// Quartz extensions: in day-of-month, "L" (the last day), "L-n" (n days
// before the last day), "LW" (the last weekday, Monday to Friday) and "nW"
// (the weekday nearest day n, never crossing into another month; nothing in
// months shorter than n days); in day-of-week, "dL" (the last weekday d of
// the month, e.g. "5L" or "FRIL") and "d#n" (the n-th weekday d, e.g.
// "FRI#3"). Day-of-week keeps cron's numbering, so Quartz's "6L" (last
// Friday, Sunday being 1) is "5L" here; names avoid the question.
//
// Hashed values (Jenkins' H): "H" is one value of the field chosen by a
// stable hash of Options.HashSeed (meant to be the job's id) and the
// field's name, so jobs written "H H * * *" spread over the day instead of
// all firing at midnight; "H(a-b)" picks within a-b, and "H/n" and
// "H(a-b)/n" step by n from a hashed offset. Day-of-month H stays within
// 1-28. Without a seed, H is a ParseError naming the field. See HashSlot.
//
// Macros: @yearly (@annually), @monthly, @weekly, @daily (@midnight),
// @hourly, and "@every <duration>" with a Go duration that is a whole number
// of seconds and at least 1s. "@every" fires at anchor + k*interval for
// k >= 0, where the anchor is Options.Start, or the Unix epoch when Start is
// zero, so a job's firings do not depend on when it was registered or on
// when a scheduler process started.
//
// Once and Every build the other two kinds of schedule directly, and
// ParseRRule reads RFC 5545 recurrence rules (RRULE with EXDATE and RDATE),
// evaluated in the same zone with the same DST policies as cron. FREQ=SECONDLY
// and MINUTELY are refused: cron and intervals say those more plainly, and
// keeping a rule's periods at an hour or longer bounds the cost of Next.
//
// NewUnion fires at the instants of several schedules, once per instant,
// and NewExcluded removes the instants whose wall reading falls in an
// exclusion's window (daily, on given weekdays, between given dates); Notes
// lists what a calendar and exclusions did to a schedule, for previews.
//
// # Time zones and daylight saving
//
// A cron schedule's fields describe the wall clock of Options.Location, and
// are evaluated against that zone's real transitions at each step. Wall
// times that do not exist (the clocks jumped over them) or that exist twice
// (the clocks went back) are settled per schedule:
//
//   - GapShift (default): a matching wall time inside a gap fires once at
//     the first instant after the gap, the instant of the transition.
//     Several matching wall times inside one gap collapse into that one
//     firing, and if a real wall time at that instant matches too, it is
//     the same firing: a schedule fires at most once per instant. A match
//     after the first instant (e.g. 03:30 after a 02:00-03:00 gap) is a
//     firing of its own.
//   - GapSkip: wall times inside a gap do not fire.
//   - RepeatFirst (default), RepeatLast, RepeatBoth: a wall time that occurs
//     twice fires at its first occurrence, its last, or both.
//
// A schedule whose hour field selects every hour ("*", "*/1", "0-23")
// follows real elapsed time instead, whatever its policies: wall times in a
// gap simply do not occur, and a repeated hour fires twice. So "*/15 * * * *"
// fires every fifteen real minutes through both transitions, while
// "30 2 * * *" is governed by the policies.
//
// Fixed intervals and one-offs are instants, so the zone only affects how
// they are presented.
//
// # Bounds
//
// Options.Start and Options.End bound every kind of schedule: no firing
// before Start, none after End (inclusive). Next returns the zero Time when
// no firing remains. Firings are never later than the year 9999.
//
// # Evaluation
//
// Next never expands a schedule: each field is a bitset, and Next walks
// calendar fields forward inside one zone period at a time, consulting the
// zone only at period boundaries. It does not allocate; a typical call takes
// well under a microsecond. DESIGN.md beside this file explains the
// algorithm and the DST rules in detail.
package schedule
