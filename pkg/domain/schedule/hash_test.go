package schedule

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"testing"
	"time"
)

// TestHashSlotIsStable pins the hash behind H: every H job's slot depends
// on it, so a change here would move every such job on upgrade.
func TestHashSlotIsStable(t *testing.T) {
	s, err := Parse("H H * * *", Options{HashSeed: "0b7c1a52-5d1e-4b0e-9a55-2f0d7d1e8c11"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse("H H * * *", Options{HashSeed: "0b7c1a52-5d1e-4b0e-9a55-2f0d7d1e8c11"})
	if err != nil {
		t.Fatal(err)
	}
	if s.String() != again.String() {
		t.Fatalf("same seed, different slots: %q vs %q", s, again)
	}
	// Computed from HashSlot's definition; a different hash gives a
	// different slot for this seed with probability 1439/1440.
	if got, want := s.String(), pinnedHH; got != want {
		t.Fatalf("H H * * * with the pinned seed = %q, want %q (the H hash changed)", got, want)
	}
}

const pinnedHH = "22 17 * * *" // also computed independently in Python from the definition in HashSlot

func TestHashForms(t *testing.T) {
	seeds := make([]string, 500)
	for i := range seeds {
		seeds[i] = fmt.Sprintf("job-%04d", i)
	}
	cases := []struct {
		expr    string
		field   func(c *cron) uint64
		lo, hi  int // every value within
		count   int // values per job
		spacing int // distance between consecutive values, 0 for one value
	}{
		{"H * * * *", func(c *cron) uint64 { return c.minute }, 0, 59, 1, 0},
		{"H/15 * * * *", func(c *cron) uint64 { return c.minute }, 0, 59, 4, 15},
		{"H(0-29) * * * *", func(c *cron) uint64 { return c.minute }, 0, 29, 1, 0},
		{"H(10-40)/10 * * * *", func(c *cron) uint64 { return c.minute }, 10, 40, 3, 10}, // offset 0-9: 3 or 4 values
		{"0 H * * *", func(c *cron) uint64 { return uint64(c.hour) }, 0, 23, 1, 0},
		{"0 0 H * *", func(c *cron) uint64 { return uint64(c.dom) }, 1, 28, 1, 0},
		{"0 0 1 H *", func(c *cron) uint64 { return uint64(c.month) }, 1, 12, 1, 0},
		{"0 0 * * H", func(c *cron) uint64 { return uint64(c.dow) }, 0, 6, 1, 0},
		{"H * * * * *", func(c *cron) uint64 { return c.second }, 0, 59, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.expr, func(t *testing.T) {
			seen := map[int]int{}
			for _, seed := range seeds {
				s, err := Parse(tc.expr, Options{HashSeed: seed})
				if err != nil {
					t.Fatal(err)
				}
				set := tc.field(s.(*cron))
				n := bits.OnesCount64(set)
				if n < tc.count || (tc.spacing == 0 && n != 1) {
					t.Fatalf("seed %s: %q selects %d values (%b), want %d", seed, tc.expr, n, set, tc.count)
				}
				prev := -1
				for b := set; b != 0; b &= b - 1 {
					v := bits.TrailingZeros64(b)
					if v < tc.lo || v > tc.hi {
						t.Fatalf("seed %s: %q selects %d, outside %d-%d", seed, tc.expr, v, tc.lo, tc.hi)
					}
					if prev >= 0 && v-prev != tc.spacing {
						t.Fatalf("seed %s: %q values %d and %d are not %d apart", seed, tc.expr, prev, v, tc.spacing)
					}
					if prev < 0 {
						seen[v]++
					}
					prev = v
				}
			}
			// Spread: 500 jobs over k first values should use nearly all
			// of them and put no more than 3x the fair share on any one.
			k := tc.hi - tc.lo + 1
			if tc.spacing > 0 {
				k = min(tc.spacing, k)
			}
			if len(seen) < k*9/10 {
				t.Fatalf("%q: 500 seeds used only %d of %d slots", tc.expr, len(seen), k)
			}
			for v, n := range seen {
				if n > 3*len(seeds)/k+3 {
					t.Fatalf("%q: %d of 500 seeds chose %d", tc.expr, n, v)
				}
			}
		})
	}
}

// TestHashFieldsIndependent: a job's hashed minute and hour come from
// different hashes, so jobs are not confined to a diagonal.
func TestHashFieldsIndependent(t *testing.T) {
	pairs := map[[2]int]bool{}
	same := 0
	for i := range 2000 {
		s, err := Parse("H H * * *", Options{HashSeed: fmt.Sprint("seed-", i)})
		if err != nil {
			t.Fatal(err)
		}
		c := s.(*cron)
		m, h := bits.TrailingZeros64(c.minute), bits.TrailingZeros32(c.hour)
		pairs[[2]int{m, h}] = true
		if m%24 == h {
			same++
		}
	}
	if len(pairs) < 700 {
		t.Fatalf("2000 seeds used only %d (minute, hour) pairs", len(pairs))
	}
	if same > 2000/24*2 {
		t.Fatalf("%d of 2000 seeds have minute%%24 == hour: fields are correlated", same)
	}
}

func TestHashErrorsNameTheField(t *testing.T) {
	cases := []struct{ expr, seed, field, want string }{
		{"H * * * *", "", fieldMinute, "no hash seed"},
		{"0 0 H * *", "", fieldDom, "no hash seed"},
		{"0 0 * * H", "", fieldDow, "no hash seed"},
		{"0 H(5-1) * * *", "s", fieldHour, "runs backwards"},
		{"H(0-60) * * * *", "s", fieldMinute, "60 is out of range 0-59"},
		{"H(0) * * * *", "s", fieldMinute, "optional range in parentheses"},
		{"H(0-5 * * * *", "s", fieldMinute, "optional range in parentheses"},
		{"HX * * * *", "s", fieldMinute, "optional range in parentheses"},
		{"H/0 * * * *", "s", fieldMinute, "out of range 1-59"},
		{"H/x * * * *", "s", fieldMinute, "not a number"},
		{"0 0 1 H(0-3) *", "s", fieldMonth, "0 is out of range 1-12"},
	}
	for _, tc := range cases {
		_, err := Parse(tc.expr, Options{HashSeed: tc.seed})
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Fatalf("Parse(%q, seed %q) = %v, want a *ParseError", tc.expr, tc.seed, err)
		}
		if pe.Field != tc.field || !strings.Contains(pe.Reason, tc.want) {
			t.Fatalf("Parse(%q, seed %q) = field %q reason %q; want field %q mentioning %q", tc.expr, tc.seed, pe.Field, pe.Reason, tc.field, tc.want)
		}
	}
}

// TestHashSpreadsFirings: a thousand "@daily"-like jobs written with H fire
// at many different instants, where "0 0 * * *" puts them all on one.
func TestHashSpreadsFirings(t *testing.T) {
	from := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	at := map[time.Time]int{}
	for i := range 1000 {
		s, err := Parse("H H * * *", Options{HashSeed: fmt.Sprint("job-", i)})
		if err != nil {
			t.Fatal(err)
		}
		at[s.Next(from)]++
	}
	worst := 0
	for _, n := range at {
		worst = max(worst, n)
	}
	if len(at) < 500 || worst > 10 {
		t.Fatalf("1000 H H jobs fire at %d instants, at most %d together; want spread", len(at), worst)
	}
}

// TestHashInZone: a hashed hour in a zone is a wall hour there, and the DST
// policies apply to it like to a written hour.
func TestHashInZone(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		seed := fmt.Sprint("ny-", i)
		h, err := Parse("0 H * * *", Options{HashSeed: seed, Location: ny})
		if err != nil {
			t.Fatal(err)
		}
		written, err := Parse(h.String(), Options{Location: ny})
		if err != nil {
			t.Fatal(err)
		}
		from := time.Date(2026, 3, 7, 0, 0, 0, 0, ny) // the day before spring-forward
		for x, y := from, from; x.Before(from.AddDate(0, 0, 3)); {
			x, y = h.Next(x), written.Next(y)
			if !x.Equal(y) {
				t.Fatalf("seed %s: %q fires %v, its canonical form %q fires %v", seed, "0 H * * *", x, h, y)
			}
		}
	}
}

// FuzzParseHash checks hashed fields: with a seed, Parse either fails with
// a *ParseError naming a field or gives a schedule whose canonical form (H
// resolved into numbers) parses back, without any seed, to the same
// schedule, and parsing again with the same seed gives the same one;
// without a seed, an expression that parsed with H in it is refused.
func FuzzParseHash(f *testing.F) {
	for i, s := range []string{"H * * * *", "H/15 H(0-5) * * *", "H(10-40)/7 H H * *", "0 0 H H H", "H H(1-7)/2 * * H(1-5)", "h/5 * * * * *", "H,5 H * * *", "0 0 H/10 * *"} {
		f.Add(s, fmt.Sprint("seed-", i), uint8(i))
	}
	f.Fuzz(func(t *testing.T, expr, seed string, zone uint8) {
		if seed == "" {
			seed = "x"
		}
		opts := fuzzOptions(zone, 0, 0)
		opts.HashSeed = seed
		s, err := Parse(expr, opts)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Field == "" || pe.Reason == "" {
				t.Fatalf("Parse(%q) returned %T %v, want a *ParseError with a field and a reason", expr, err, err)
			}
			return
		}
		again, err := Parse(expr, opts)
		if err != nil || again.String() != s.String() {
			t.Fatalf("Parse(%q, seed %q) twice: %v, %v (%v)", expr, seed, s, again, err)
		}
		canon := s.String()
		plain := opts
		plain.HashSeed = ""
		back, err := Parse(canon, plain)
		if err != nil || back.String() != canon {
			t.Fatalf("canonical form %q of %q: %v, %v", canon, expr, back, err)
		}
		from := time.Unix(1767225600, 0)
		if a, b := s.Next(from), back.Next(from); !a.Equal(b) {
			t.Fatalf("%q and %q differ: %v vs %v", expr, canon, a, b)
		}
		if hasHashItem(expr) {
			if _, err := Parse(expr, plain); err == nil {
				t.Fatalf("Parse(%q) without a seed succeeded", expr)
			}
		}
	})
}

// hasHashItem reports whether a list item of expr starts with H.
func hasHashItem(expr string) bool {
	for _, field := range strings.Fields(expr) {
		for _, item := range strings.Split(field, ",") {
			if item != "" && (item[0] == 'H' || item[0] == 'h') {
				return true
			}
		}
	}
	return false
}
