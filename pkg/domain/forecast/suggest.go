package forecast

import (
	"strings"
)

// hashMacros are the H forms of the macros that name a fixed instant: the
// same period, at a minute (and for longer periods an hour) of the job's
// own.
var hashMacros = map[string]string{
	"@hourly":   "H * * * *",
	"@daily":    "H H * * *",
	"@midnight": "H H * * *",
	"@weekly":   "H H * * H",
	"@monthly":  "H H H * *",
	"@yearly":   "H H H H *",
	"@annually": "H H H H *",
}

// SuggestH returns an H form of a cron expression that keeps its period
// but lets each job pick its own instant within it: a seconds or minute
// field that is one number becomes H, and a step "*/n" becomes "H/n"; the
// hour and day fields are left as written (an operator who asked for 02:00
// usually means "some time around two", not "any hour"). Macros become
// their H forms ("@daily" → "H H * * *"). It returns "" when there is
// nothing to spread: an expression without a fixed second or minute, or
// one that is not a plain cron expression.
func SuggestH(cron string) string {
	cron = strings.TrimSpace(cron)
	if cron == "" {
		return ""
	}
	if cron[0] == '@' {
		return hashMacros[strings.ToLower(cron)]
	}
	fields := strings.Fields(cron)
	if len(fields) != 5 && len(fields) != 6 {
		return ""
	}
	// The fields to spread: the minute, and the second in the six-field
	// form. A second field of 0 becomes 0 (a minute-level schedule stays
	// on whole minutes; H on the minute spreads it).
	spread := []int{0}
	if len(fields) == 6 {
		spread = []int{0, 1}
	}
	changed := false
	for _, i := range spread {
		f := fields[i]
		switch {
		case isNumber(f):
			if len(fields) == 6 && i == 0 && f == "0" && isNumber(fields[1]) {
				continue // "0 30 2 * * *": spread the minute only
			}
			fields[i], changed = "H", true
		case strings.HasPrefix(f, "*/") && isNumber(f[2:]):
			fields[i], changed = "H/"+f[2:], true
		case strings.HasPrefix(f, "0/") && isNumber(f[2:]):
			fields[i], changed = "H/"+f[2:], true
		}
	}
	if !changed {
		return ""
	}
	return strings.Join(fields, " ")
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
