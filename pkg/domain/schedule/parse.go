package schedule

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// ParseError is the error Parse and Every return. It names the field
// (second, minute, hour, day-of-month, month, day-of-week; "expression" for
// the shape of the whole expression, macros and @every intervals; "anchor"
// for an @every anchor outside the years 1-9999) and the offending token,
// and says why in terms a user can act on.
type ParseError struct {
	Field string
	Token string
	// Reason is a complete phrase that names the token, such as
	// "32 is out of range 1-31".
	Reason string

	err error // what errors.Is sees through Unwrap, e.g. ErrNeverFires
}

// ErrNeverFires is what a ParseError of a recurrence rule that has no
// firing at all (from its DTSTART, within its bounds) wraps.
var ErrNeverFires = errors.New("schedule: never fires")

// Unwrap returns ErrNeverFires for a rule that never fires, else nil.
func (e *ParseError) Unwrap() error { return e.err }

// Error returns "field: reason", for example
// "day-of-month: 32 is out of range 1-31".
func (e *ParseError) Error() string { return e.Field + ": " + e.Reason }

// Field names, as they appear in ParseError.Field.
const (
	fieldSecond = "second"
	fieldMinute = "minute"
	fieldHour   = "hour"
	fieldDom    = "day-of-month"
	fieldMonth  = "month"
	fieldDow    = "day-of-week"
	fieldExpr   = "expression"
)

var monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
var dayNames = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}

// fieldSpec describes one numeric field.
type fieldSpec struct {
	name     string
	min, max int // accepted numbers; day-of-week accepts 0-7
	starMax  int // upper end of "*" and of "a/n"; below max only for day-of-week
	names    []string
	nameBase int // value of names[0]
}

var (
	secondSpec = fieldSpec{name: fieldSecond, min: 0, max: 59, starMax: 59}
	minuteSpec = fieldSpec{name: fieldMinute, min: 0, max: 59, starMax: 59}
	hourSpec   = fieldSpec{name: fieldHour, min: 0, max: 23, starMax: 23}
	domSpec    = fieldSpec{name: fieldDom, min: 1, max: 31, starMax: 31}
	monthSpec  = fieldSpec{name: fieldMonth, min: 1, max: 12, starMax: 12, names: monthNames, nameBase: 1}
	// Day-of-week accepts 7 as a second Sunday, but "*" and "a/n" stop at
	// 6 so that "*/2" does not name Sunday twice and "5/2" is Friday only.
	dowSpec = fieldSpec{name: fieldDow, min: 0, max: 7, starMax: 6, names: dayNames, nameBase: 0}
)

// macros are the "@" shorthands that stand for a five-field expression.
var macros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// Parse parses a schedule expression evaluated with opts:
//
//   - five fields "minute hour day-of-month month day-of-week", or six with
//     a leading seconds field;
//   - the macros @yearly, @annually, @monthly, @weekly, @daily, @midnight
//     and @hourly;
//   - "@every <duration>" (a Go duration, whole seconds, at least 1s),
//     anchored at opts.Start, or at the Unix epoch when Start is zero.
//
// See the package documentation for the field syntax. Every error is a
// *ParseError.
func Parse(expr string, opts Options) (Schedule, error) {
	s := strings.TrimSpace(expr)
	if s == "" {
		return nil, &ParseError{Field: fieldExpr, Reason: "the expression is empty"}
	}
	if s[0] == '@' {
		return parseMacro(s, opts)
	}
	fields := strings.Fields(s)
	if strings.Contains(fields[0], "=") {
		// robfig/cron and some crontabs accept "CRON_TZ=Zone expr"; here
		// the zone is an option, and silently ignoring it would be worse.
		return nil, &ParseError{Field: fieldExpr, Token: fields[0],
			Reason: fields[0] + ": a time zone is not part of the expression; set it as the schedule's time zone (Options.Location, --tz)"}
	}
	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return nil, &ParseError{Field: fieldExpr, Token: s,
			Reason: fmt.Sprintf("%q has %d fields; want 5 (minute hour day-of-month month day-of-week) or 6 (a leading second field, then those five)", s, len(fields))}
	}
	c, err := parseFields(fields, opts.HashSeed)
	if err != nil {
		return nil, err
	}
	if !c.firesEver() {
		return nil, &ParseError{Field: fieldExpr, Token: s,
			Reason: fmt.Sprintf("%q never fires: no date matches its day-of-month, month and day-of-week together", s)}
	}
	c.setOptions(opts)
	return c, nil
}

func parseMacro(s string, opts Options) (Schedule, error) {
	fields := strings.Fields(s)
	name := strings.ToLower(fields[0])
	if name == "@every" {
		if len(fields) != 2 {
			return nil, &ParseError{Field: fieldExpr, Token: s,
				Reason: fmt.Sprintf("%q: @every takes one duration, such as \"@every 90s\" or \"@every 1h30m\"", s)}
		}
		d, err := time.ParseDuration(fields[1])
		if err != nil {
			return nil, &ParseError{Field: fieldExpr, Token: fields[1],
				Reason: fmt.Sprintf("@every %s: %q is not a duration such as 90s or 1h30m", fields[1], fields[1])}
		}
		if err := checkInterval(d, fields[1]); err != nil {
			return nil, err
		}
		e := newEvery(d, time.Time{}, opts)
		if e.anchorSec < minUnix || e.anchorSec > maxUnix {
			return nil, &ParseError{Field: "anchor", Token: opts.Start.String(),
				Reason: "start " + opts.Start.String() + " is outside the years 1-9999"}
		}
		return e, nil
	}
	body, ok := macros[name]
	if !ok {
		return nil, &ParseError{Field: fieldExpr, Token: fields[0],
			Reason: fields[0] + " is not a known macro; want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>"}
	}
	if len(fields) != 1 {
		return nil, &ParseError{Field: fieldExpr, Token: s,
			Reason: fmt.Sprintf("%q: %s takes no fields after it", s, fields[0])}
	}
	c, err := parseFields(append([]string{"0"}, strings.Fields(body)...), "")
	if err != nil {
		panic("schedule: bad built-in macro " + name + ": " + err.Error())
	}
	c.setOptions(opts)
	return c, nil
}

// parseFields parses exactly six fields: second minute hour dom month dow.
// seed is what H hashes (Options.HashSeed).
func parseFields(f []string, seed string) (*cron, error) {
	c := &cron{}
	var err error
	if c.second, err = parseNumeric(f[0], secondSpec, seed); err != nil {
		return nil, err
	}
	if c.minute, err = parseNumeric(f[1], minuteSpec, seed); err != nil {
		return nil, err
	}
	var hour uint64
	if hour, err = parseNumeric(f[2], hourSpec, seed); err != nil {
		return nil, err
	}
	c.hour = uint32(hour)
	if err = c.parseDom(f[3], seed); err != nil {
		return nil, err
	}
	var month uint64
	if month, err = parseNumeric(f[4], monthSpec, seed); err != nil {
		return nil, err
	}
	c.month = uint16(month)
	if err = c.parseDow(f[5], seed); err != nil {
		return nil, err
	}
	return c, nil
}

// isStar reports whether a day field is the "no restriction" spelling that
// turns the day-of-month/day-of-week OR rule off: "*", "*/1" or "?".
func isStar(field string) bool {
	return field == "*" || field == "?" || field == "*/1"
}

func errQuestion(spec fieldSpec, field string) error {
	return &ParseError{Field: spec.name, Token: field,
		Reason: "? is only allowed in day-of-month and day-of-week, as the whole field"}
}

// parseNumeric parses a field of numbers, names, "*", ranges, steps and
// lists into a bitset (bit v set when v matches).
func parseNumeric(field string, spec fieldSpec, seed string) (uint64, error) {
	if field == "?" {
		return 0, errQuestion(spec, field)
	}
	items, err := splitList(field, spec)
	if err != nil {
		return 0, err
	}
	var set uint64
	for _, item := range items {
		b, err := parseItem(item, spec, seed)
		if err != nil {
			return 0, err
		}
		set |= b
	}
	return set, nil
}

func splitList(field string, spec fieldSpec) ([]string, error) {
	items := strings.Split(field, ",")
	for _, item := range items {
		if item == "" {
			return nil, &ParseError{Field: spec.name, Token: field,
				Reason: fmt.Sprintf("%q has an empty list item", field)}
		}
		if len(items) > 1 && (item == "*" || item == "?") {
			return nil, &ParseError{Field: spec.name, Token: item,
				Reason: fmt.Sprintf("%s cannot be combined with other values in the list %q", item, field)}
		}
		if item == "?" && spec.name != fieldDom && spec.name != fieldDow {
			return nil, errQuestion(spec, item)
		}
	}
	return items, nil
}

// parseItem parses one list item: "*", "v", "a-b", each optionally "/step",
// "v/step" meaning v through the end of the range, or a hashed "H" form
// (see parseHash).
func parseItem(item string, spec fieldSpec, seed string) (uint64, error) {
	base, stepStr, hasStep := strings.Cut(item, "/")
	if base != "" && (base[0] == 'H' || base[0] == 'h') {
		return parseHash(item, base, stepStr, hasStep, spec, seed)
	}
	lo, hi := spec.min, spec.starMax
	switch {
	case base == "?":
		return 0, &ParseError{Field: spec.name, Token: item,
			Reason: fmt.Sprintf("%s: ? stands alone as the whole field, without a step", item)}
	case base == "*":
	case strings.Contains(base, "-"):
		a, b, _ := strings.Cut(base, "-")
		var err error
		if lo, err = parseValue(a, item, spec); err != nil {
			return 0, err
		}
		if hi, err = parseValue(b, item, spec); err != nil {
			return 0, err
		}
		if lo > hi {
			return 0, &ParseError{Field: spec.name, Token: item,
				Reason: fmt.Sprintf("the range %s runs backwards; ranges do not wrap around, so list both parts instead", base)}
		}
	default:
		v, err := parseValue(base, item, spec)
		if err != nil {
			return 0, err
		}
		lo = v
		if !hasStep {
			hi = v
		} else if v > hi {
			// "7/2" in day-of-week: a start past the range end still
			// names its own value.
			hi = v
		}
	}
	step := 1
	if hasStep {
		var err error
		if step, err = parseStep(stepStr, item, spec); err != nil {
			return 0, err
		}
	}
	return spanSet(lo, hi, step, spec), nil
}

// parseStep parses the n of "/n" within spec.
func parseStep(stepStr, item string, spec fieldSpec) (int, error) {
	n, err := strconv.Atoi(stepStr)
	maxStep := spec.starMax - spec.min
	if maxStep < 1 {
		maxStep = 1
	}
	if err != nil || !isDigits(stepStr) {
		return 0, &ParseError{Field: spec.name, Token: item,
			Reason: fmt.Sprintf("the step %q in %s is not a number", stepStr, item)}
	}
	if n < 1 || n > maxStep {
		return 0, &ParseError{Field: spec.name, Token: item,
			Reason: fmt.Sprintf("the step %d in %s is out of range 1-%d", n, item, maxStep)}
	}
	return n, nil
}

// spanSet returns the bitset of lo, lo+step, ... up to hi.
func spanSet(lo, hi, step int, spec fieldSpec) uint64 {
	var set uint64
	for v := lo; v <= hi; v += step {
		set |= 1 << uint(v)
	}
	if spec.name == fieldDow && set&(1<<7) != 0 {
		set = set&^(1<<7) | 1 // 7 is Sunday, as is 0
	}
	return set
}

// hashDomMax is the top of a bare "H" in day-of-month: every month has a
// 28th, so a hashed day never lands on a date some months lack.
const hashDomMax = 28

// parseHash parses Jenkins-style hashed items: "H" (one value in the
// field's range, 1-28 for day-of-month), "H(a-b)" (one value in a-b), "H/n"
// (every n-th value from a hashed offset below n) and "H(a-b)/n". The value
// is a stable function of seed and the field's name, so a job keeps its
// slot across restarts and releases, and different fields of one job are
// independent (a job at minute 7 is not therefore at hour 7).
func parseHash(item, base, stepStr string, hasStep bool, spec fieldSpec, seed string) (uint64, error) {
	lo, hi := spec.min, spec.starMax
	if spec.name == fieldDom {
		hi = hashDomMax
	}
	if rest := base[1:]; rest != "" {
		inner, ok := strings.CutPrefix(rest, "(")
		if ok {
			inner, ok = strings.CutSuffix(inner, ")")
		}
		a, b, dash := strings.Cut(inner, "-")
		if !ok || !dash {
			return 0, &ParseError{Field: spec.name, Token: item,
				Reason: fmt.Sprintf("%s: H takes an optional range in parentheses and an optional step, such as H, H(0-29), H/15 or H(0-29)/10", item)}
		}
		var err error
		if lo, err = parseValue(a, item, spec); err != nil {
			return 0, err
		}
		if hi, err = parseValue(b, item, spec); err != nil {
			return 0, err
		}
		if lo > hi {
			return 0, &ParseError{Field: spec.name, Token: item,
				Reason: fmt.Sprintf("the range %s in %s runs backwards; ranges do not wrap around", inner, item)}
		}
	} else if spec.name == fieldDom && hasStep {
		hi = spec.starMax // H/n steps through the whole month, like */n
	}
	n := hi - lo + 1
	step := n // no step: exactly one value
	if hasStep {
		var err error
		if step, err = parseStep(stepStr, item, spec); err != nil {
			return 0, err
		}
	}
	if seed == "" {
		return 0, &ParseError{Field: spec.name, Token: item,
			Reason: fmt.Sprintf("%s: H picks a value hashed from the job, and no hash seed was given (the job's id, Options.HashSeed)", item)}
	}
	off := int(HashSlot(seed, spec.name) % uint64(min(step, n)))
	return spanSet(lo+off, hi, step, spec), nil
}

// HashSlot is the stable 64-bit hash behind H: FNV-1a of seed, a zero byte
// and field, through the SplitMix64 finaliser so that the low bits, which
// the modulo reads, depend on every input byte. It is part of the schedule
// format: changing it would move every H job, so TestHashSlotIsStable pins
// it. Exported so that tools (the forecast's slot suggestions) can say
// where H would put a job without parsing an expression.
func HashSlot(seed, field string) uint64 {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	for i := 0; i < len(seed); i++ {
		h = (h ^ uint64(seed[i])) * prime64
	}
	h *= prime64 // the zero byte between seed and field: h ^ 0 is h
	for i := 0; i < len(field); i++ {
		h = (h ^ uint64(field[i])) * prime64
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// parseValue parses a number or a name within spec's range.
func parseValue(s, item string, spec fieldSpec) (int, error) {
	if s == "" {
		return 0, &ParseError{Field: spec.name, Token: item,
			Reason: fmt.Sprintf("%q is missing a number", item)}
	}
	if isDigits(s) {
		v, err := strconv.Atoi(s)
		if err != nil || v < spec.min || v > spec.max {
			return 0, &ParseError{Field: spec.name, Token: s,
				Reason: fmt.Sprintf("%s is out of range %d-%d", s, spec.min, spec.max)}
		}
		return v, nil
	}
	up := strings.ToUpper(s)
	for i, n := range spec.names {
		if up == n {
			return spec.nameBase + i, nil
		}
	}
	what := "a number"
	switch spec.name {
	case fieldMonth:
		what = "a number or a month name (JAN-DEC)"
	case fieldDow:
		what = "a number or a day name (SUN-SAT)"
	}
	return 0, &ParseError{Field: spec.name, Token: s,
		Reason: fmt.Sprintf("%q is not %s", s, what)}
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// parseDom parses day-of-month: the numeric syntax plus Quartz's L, L-n, LW
// and nW.
func (c *cron) parseDom(field, seed string) error {
	if isStar(field) {
		c.domStar = true
		c.dom = fullDays
		return nil
	}
	items, err := splitList(field, domSpec)
	if err != nil {
		return err
	}
	for _, item := range items {
		up := strings.ToUpper(item)
		switch {
		case up == "L":
			c.domLast |= 1
		case up == "LW":
			c.domLastWeekday = true
		case strings.HasPrefix(up, "L-"):
			n, err := strconv.Atoi(up[2:])
			if err != nil || !isDigits(up[2:]) {
				return &ParseError{Field: fieldDom, Token: item,
					Reason: fmt.Sprintf("%s: L-n needs a number of days before the last day, such as L-3", item)}
			}
			if n > 30 {
				return &ParseError{Field: fieldDom, Token: item,
					Reason: fmt.Sprintf("%s: the offset %d is out of range 0-30", item, n)}
			}
			c.domLast |= 1 << uint(n)
		case strings.HasSuffix(up, "W") && !strings.ContainsAny(up, "-/"):
			v, err := parseValue(up[:len(up)-1], item, domSpec)
			if err != nil {
				return err
			}
			c.domWeekday |= 1 << uint(v)
		case strings.ContainsAny(up, "LW"):
			return &ParseError{Field: fieldDom, Token: item,
				Reason: fmt.Sprintf("%s: L and W are written alone (L, L-3, LW, 15W), not with ranges or steps", item)}
		default:
			b, err := parseItem(item, domSpec, seed)
			if err != nil {
				return err
			}
			c.dom |= uint32(b)
		}
	}
	return nil
}

// parseDow parses day-of-week: the numeric syntax plus Quartz's dL (last
// such weekday of the month) and d#n (n-th such weekday), with cron's
// numbering (0 or 7 is Sunday), not Quartz's (1 is Sunday).
func (c *cron) parseDow(field, seed string) error {
	if isStar(field) {
		c.dowStar = true
		c.dow = allWeekdays
		return nil
	}
	items, err := splitList(field, dowSpec)
	if err != nil {
		return err
	}
	for _, item := range items {
		up := strings.ToUpper(item)
		switch {
		case up == "L":
			return &ParseError{Field: fieldDow, Token: item,
				Reason: "L alone is ambiguous in day-of-week; write 5L or FRIL for the last Friday of the month, or use L in day-of-month for the last day"}
		case strings.Contains(up, "#"):
			d, n, _ := strings.Cut(up, "#")
			wd, err := parseValue(d, item, dowSpec)
			if err != nil {
				return err
			}
			k, err := strconv.Atoi(n)
			if err != nil || !isDigits(n) || k < 1 || k > 5 {
				return &ParseError{Field: fieldDow, Token: item,
					Reason: fmt.Sprintf("%s: the occurrence %q is out of range 1-5", item, n)}
			}
			c.dowNth |= 1 << uint((wd%7)*8+k)
		case strings.HasSuffix(up, "L") && !strings.ContainsAny(up, "-/,"):
			wd, err := parseValue(up[:len(up)-1], item, dowSpec)
			if err != nil {
				return err
			}
			c.dowLast |= 1 << uint(wd%7)
		case strings.ContainsAny(up, "L#") && !hasDayName(up):
			return &ParseError{Field: fieldDow, Token: item,
				Reason: fmt.Sprintf("%s: L and # are written alone (5L, FRI#3), not with ranges or steps", item)}
		default:
			b, err := parseItem(item, dowSpec, seed)
			if err != nil {
				return err
			}
			c.dow |= uint8(b)
		}
	}
	return nil
}

// hasDayName reports whether s contains a day name, so that "SAT" or
// "SUN-TUE" are not mistaken for a misplaced L.
func hasDayName(s string) bool {
	for _, n := range dayNames {
		if strings.Contains(s, n) {
			return true
		}
	}
	return false
}

// count returns how many values a bitset holds.
func count(b uint64) int { return bits.OnesCount64(b) }
