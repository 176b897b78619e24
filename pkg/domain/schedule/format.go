package schedule

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// String returns the canonical form of the expression: five fields when the
// seconds field is just 0, otherwise six; numbers rather than names; each
// field written as "*", a step ("*/15", "5/20", "0-30/10"), or a list of
// values and ranges, followed by any Quartz items. Macros come back
// expanded ("@daily" is "0 0 * * *").
func (c *cron) String() string {
	var sb strings.Builder
	if c.second != 1 {
		sb.WriteString(formatSet(c.second, secondSpec))
		sb.WriteByte(' ')
	}
	sb.WriteString(formatSet(c.minute, minuteSpec))
	sb.WriteByte(' ')
	sb.WriteString(formatSet(uint64(c.hour), hourSpec))
	sb.WriteByte(' ')
	sb.WriteString(c.formatDom())
	sb.WriteByte(' ')
	sb.WriteString(formatSet(uint64(c.month), monthSpec))
	sb.WriteByte(' ')
	sb.WriteString(c.formatDow())
	return sb.String()
}

func (c *cron) formatDom() string {
	if c.domStar {
		return "*"
	}
	var items []string
	if c.dom != 0 {
		items = append(items, formatList(uint64(c.dom), domSpec))
	}
	for b := c.domLast; b != 0; b &= b - 1 {
		if n := bits.TrailingZeros32(b); n == 0 {
			items = append(items, "L")
		} else {
			items = append(items, "L-"+strconv.Itoa(n))
		}
	}
	if c.domLastWeekday {
		items = append(items, "LW")
	}
	for b := c.domWeekday; b != 0; b &= b - 1 {
		items = append(items, strconv.Itoa(bits.TrailingZeros32(b))+"W")
	}
	return strings.Join(items, ",")
}

func (c *cron) formatDow() string {
	if c.dowStar {
		return "*"
	}
	var items []string
	if c.dow != 0 {
		items = append(items, formatList(uint64(c.dow), dowSpec))
	}
	for b := c.dowLast; b != 0; b &= b - 1 {
		items = append(items, strconv.Itoa(bits.TrailingZeros8(b))+"L")
	}
	for b := c.dowNth; b != 0; b &= b - 1 {
		i := bits.TrailingZeros64(b)
		items = append(items, strconv.Itoa(i/8)+"#"+strconv.Itoa(i%8))
	}
	return strings.Join(items, ",")
}

// formatSet writes a field whose full set means "*" (second, minute, hour,
// month).
func formatSet(set uint64, spec fieldSpec) string {
	if set == fullSet(spec) {
		return "*"
	}
	return formatList(set, spec)
}

func fullSet(spec fieldSpec) uint64 {
	return (uint64(1)<<uint(spec.starMax+1) - 1) &^ (uint64(1)<<uint(spec.min) - 1)
}

// formatList writes a non-empty set as a step when it is an arithmetic
// progression of four or more values (shorter ones read better as lists:
// "1,3,5" rather than "1/2"), else as a list of values and ranges. Both
// forms parse back to exactly the same set.
func formatList(set uint64, spec fieldSpec) string {
	vals := make([]int, 0, count(set))
	for b := set; b != 0; b &= b - 1 {
		vals = append(vals, bits.TrailingZeros64(b))
	}
	if len(vals) >= 4 {
		step := vals[1] - vals[0]
		ap := step > 1
		for i := 2; ap && i < len(vals); i++ {
			ap = vals[i]-vals[i-1] == step
		}
		if ap {
			first, last := vals[0], vals[len(vals)-1]
			switch {
			case last+step <= spec.starMax:
				return fmt.Sprintf("%d-%d/%d", first, last, step)
			case first == spec.min:
				return "*/" + strconv.Itoa(step)
			default:
				return fmt.Sprintf("%d/%d", first, step)
			}
		}
	}
	var items []string
	for i := 0; i < len(vals); {
		j := i
		for j+1 < len(vals) && vals[j+1] == vals[j]+1 {
			j++
		}
		switch {
		case j-i >= 2:
			items = append(items, fmt.Sprintf("%d-%d", vals[i], vals[j]))
		case j == i+1:
			items = append(items, strconv.Itoa(vals[i]), strconv.Itoa(vals[j]))
		default:
			items = append(items, strconv.Itoa(vals[i]))
		}
		i = j + 1
	}
	return strings.Join(items, ",")
}

var longDayNames = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
var longMonthNames = []string{"", "January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}

// Describe returns one line in English, for example
// "at 09:00 on Monday through Friday (America/New_York)". It aims to be
// right rather than elegant: unusual combinations come out as plain lists.
func (c *cron) Describe() string {
	var parts []string
	parts = append(parts, c.describeTime())
	if d := c.describeDays(); d != "" {
		parts = append(parts, d)
	}
	if c.month != allMonths {
		parts = append(parts, "in "+describeValues(uint64(c.month), monthSpec, func(v int) string { return longMonthNames[v] }))
	}
	s := strings.Join(parts, " ") + " (" + c.loc.String()
	if c.hour != allHours && !c.fixed {
		// The policies matter only where they can act.
		if c.opts.Gap != GapShift || c.opts.Repeat != RepeatFirst {
			s += "; DST gap " + c.opts.Gap.String() + ", repeat " + c.opts.Repeat.String()
		}
	}
	return s + ")" + c.b.describe(c.loc)
}

func (c *cron) describeTime() string {
	secs, mins := count(c.second), count(c.minute)
	hours := count(uint64(c.hour))
	two := func(v int) string { return fmt.Sprintf("%02d", v) }
	switch {
	case c.second == 1 && c.minute == allMinutes && c.hour == allHours:
		return "every minute"
	case c.second == 1<<60-1 && c.minute == allMinutes && c.hour == allHours:
		return "every second"
	case c.second == 1 && c.hour == allHours:
		if step, ok := fromZeroStep(c.minute, 60); ok {
			return "every " + strconv.Itoa(step) + " minutes"
		}
		return "at minute " + describeValues(c.minute, minuteSpec, strconv.Itoa) + " of every hour"
	case c.second == 1<<60-1 && c.hour == allHours && mins == 1:
		return "every second of minute " + describeValues(c.minute, minuteSpec, strconv.Itoa) + " of every hour"
	case secs == 1 && mins == 1 && hours <= 6:
		sec := bits.TrailingZeros64(c.second)
		min := bits.TrailingZeros64(c.minute)
		var times []string
		for b := c.hour; b != 0; b &= b - 1 {
			t := two(bits.TrailingZeros32(b)) + ":" + two(min)
			if sec != 0 {
				t += ":" + two(sec)
			}
			times = append(times, t)
		}
		return "at " + joinAnd(times)
	}
	s := "at second " + describeValues(c.second, secondSpec, strconv.Itoa) +
		" of minute " + describeValues(c.minute, minuteSpec, strconv.Itoa)
	if c.second == 1 {
		s = "at minute " + describeValues(c.minute, minuteSpec, strconv.Itoa)
	}
	if c.hour == allHours {
		return s + " of every hour"
	}
	return s + " past hour " + describeValues(uint64(c.hour), hourSpec, strconv.Itoa)
}

// fromZeroStep reports whether set is 0, k, 2k, ... up to the end of a
// field of size n, with k dividing n, as in "*/15".
func fromZeroStep(set uint64, n int) (int, bool) {
	for k := 2; k < n; k++ {
		if n%k != 0 {
			continue
		}
		var want uint64
		for v := 0; v < n; v += k {
			want |= 1 << uint(v)
		}
		if set == want {
			return k, true
		}
	}
	return 0, false
}

func (c *cron) describeDays() string {
	var dom, dow []string
	if !c.domStar {
		if c.dom == fullDays {
			dom = append(dom, "every day of the month")
		} else if c.dom != 0 {
			dom = append(dom, "day "+describeValues(uint64(c.dom), domSpec, strconv.Itoa))
		}
		for b := c.domLast; b != 0; b &= b - 1 {
			if n := bits.TrailingZeros32(b); n == 0 {
				dom = append(dom, "the last day")
			} else {
				dom = append(dom, strconv.Itoa(n)+" days before the last day")
			}
		}
		if c.domLastWeekday {
			dom = append(dom, "the last weekday")
		}
		for b := c.domWeekday; b != 0; b &= b - 1 {
			dom = append(dom, "the weekday nearest day "+strconv.Itoa(bits.TrailingZeros32(b)))
		}
	}
	if !c.dowStar {
		if c.dow != 0 {
			dow = append(dow, describeValues(uint64(c.dow), dowSpec, func(v int) string { return longDayNames[v] }))
		}
		for b := c.dowLast; b != 0; b &= b - 1 {
			dow = append(dow, "the last "+longDayNames[bits.TrailingZeros8(b)])
		}
		ordinals := []string{"", "first", "second", "third", "fourth", "fifth"}
		for b := c.dowNth; b != 0; b &= b - 1 {
			i := bits.TrailingZeros64(b)
			dow = append(dow, "the "+ordinals[i%8]+" "+longDayNames[i/8])
		}
	}
	var parts []string
	if len(dom) > 0 {
		parts = append(parts, "on "+joinAnd(dom)+" of the month")
	}
	if len(dow) > 0 {
		parts = append(parts, "on "+joinAnd(dow))
	}
	return strings.Join(parts, " or ")
}

// describeValues writes a set as "Monday through Friday", "1, 15 and 30",
// or "every 2nd value from 1 through 31".
func describeValues(set uint64, spec fieldSpec, name func(int) string) string {
	var items []string
	vals := make([]int, 0, count(set))
	for b := set; b != 0; b &= b - 1 {
		vals = append(vals, bits.TrailingZeros64(b))
	}
	for i := 0; i < len(vals); {
		j := i
		for j+1 < len(vals) && vals[j+1] == vals[j]+1 {
			j++
		}
		if j-i >= 2 {
			items = append(items, name(vals[i])+" through "+name(vals[j]))
		} else {
			for k := i; k <= j; k++ {
				items = append(items, name(vals[k]))
			}
		}
		i = j + 1
	}
	return joinAnd(items)
}

func joinAnd(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}
