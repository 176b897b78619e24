package calendar

import (
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sundialhq/sundial/pkg/domain/schedule"
)

// ParseICS never panics, and what it returns is a valid calendar's
// holidays: real dates, each once, in order, names within the limit.
func FuzzParseICS(f *testing.F) {
	if b, err := os.ReadFile("testdata/holidays.ics"); err == nil {
		f.Add(string(b))
	}
	f.Add("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261225\nDURATION:P2W\nSUMMARY:a\\, b\nEND:VEVENT\nEND:VCALENDAR")
	f.Add("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20260230\nEND:VEVENT\nBEGIN:VEVENT\nDTSTART;TZID=\"a:b\":20261225T000000\nEND:VEVENT")
	f.Fuzz(func(t *testing.T, text string) {
		hols, _, err := ParseICS(text)
		if err != nil {
			return
		}
		prev := ""
		for _, h := range hols {
			if _, err := schedule.ParseDate(h.GetDate()); err != nil {
				t.Fatalf("holiday date %q: %v", h.GetDate(), err)
			}
			if h.GetDate() <= prev {
				t.Fatalf("dates out of order or repeated: %q after %q", h.GetDate(), prev)
			}
			prev = h.GetDate()
			if utf8.RuneCountInString(h.GetName()) > MaxHolidayNameLen {
				t.Fatalf("name of %d characters", utf8.RuneCountInString(h.GetName()))
			}
			if strings.ContainsAny(h.GetName(), "\r\n") {
				t.Fatalf("name with a line break: %q", h.GetName())
			}
		}
	})
}
