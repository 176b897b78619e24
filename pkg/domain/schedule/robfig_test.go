package schedule

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	robfig "github.com/robfig/cron/v3"
)

// TestDifferentialRobfig compares Next with github.com/robfig/cron/v3, a
// widely used independent implementation, on the syntax both read the
// same way in UTC: numbers, names, ranges, steps, lists, "*", "?", five or
// six fields, and the @ macros other than @every (robfig's @every counts
// from each call rather than from an anchor). Quartz items and
// day-of-week 7 are ours alone.
func TestDifferentialRobfig(t *testing.T) {
	t.Parallel()
	r := oracleRand(t)
	parser := robfig.NewParser(robfig.SecondOptional | robfig.Minute | robfig.Hour |
		robfig.Dom | robfig.Month | robfig.Dow | robfig.Descriptor)
	macros := []string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
	lo := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC).Unix()

	n := oracleCount(3000, 500)
	failures := 0
	for i := 0; i < n && failures < 5; i++ {
		var expr string
		if r.IntN(20) == 0 {
			expr = macros[r.IntN(len(macros))]
		} else {
			expr = generate(r, genKnobs{seconds: r.IntN(3) == 0, robfigSafe: true}).text
		}
		theirs, err := parser.Parse(expr)
		if err != nil {
			t.Errorf("robfig rejects %q: %v", expr, err)
			failures++
			continue
		}
		ours, err := Parse(expr, Options{})
		if err != nil {
			// Ours refuses expressions that can never fire; robfig
			// accepts them and finds nothing.
			if !strings.Contains(err.Error(), "never fires") || !theirs.Next(time.Unix(lo, 0).UTC()).IsZero() {
				t.Errorf("Parse(%q): %v", expr, err)
				failures++
			}
			continue
		}
		x := time.Unix(lo+r.Int64N(hi-lo), r.Int64N(1e9)).UTC()
		for step := 0; step < 20; step++ {
			want := theirs.Next(x)
			got := ours.Next(x)
			if want.IsZero() {
				// robfig stops looking five years ahead.
				if !got.IsZero() && got.Before(x.AddDate(5, 0, 0)) {
					t.Errorf("%q after %v: ours %v, robfig found none within five years", expr, x, got)
					failures++
				}
				break
			}
			if !got.Equal(want) {
				t.Errorf("%q after %v: ours %v, robfig %v", expr, x, got, want)
				failures++
				break
			}
			x = got
			if r.IntN(4) == 0 {
				// Sometimes resume from between firings.
				x = x.Add(time.Duration(r.Int64N(int64(time.Hour))))
			}
		}
	}
}

// The generator must produce robfig-compatible text when asked; this keeps
// the differential test from silently testing less.
func TestRobfigSafeGenerator(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		g := generate(r, genKnobs{robfigSafe: true})
		f := strings.Fields(g.text)
		dom, dow := f[len(f)-3], f[len(f)-1]
		if strings.ContainsAny(dom, "LW") || strings.ContainsAny(dow, "L#7") || strings.Contains(g.text, "*/1 ") {
			t.Fatalf("robfig-safe generator wrote %q", g.text)
		}
	}
}
