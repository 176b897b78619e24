package console

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The next instants carry the job's wall clock and a note where the
// offset changes: 2026-03-08 is the US spring-forward.
func TestLocalInstantsNoteDST(t *testing.T) {
	ts := func(s string) *timestamppb.Timestamp {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return timestamppb.New(v)
	}
	got := localInstants([]*timestamppb.Timestamp{ts("2026-03-07T07:30:00Z"), ts("2026-03-08T07:00:00Z"), ts("2026-03-09T06:30:00Z")},
		&sundialv1.Schedule{Timezone: "America/New_York", DstGap: sundialv1.DstGapPolicy_DST_GAP_POLICY_SHIFT, DstRepeat: sundialv1.DstRepeatPolicy_DST_REPEAT_POLICY_FIRST})
	if got[0].Local != "Sat 2026-03-07 02:30:00 EST" || got[1].Local != "Sun 2026-03-08 03:00:00 EDT" || got[0].Note != "" || got[2].Note != "" ||
		got[1].Note != "offset -05:00 → -04:00 (DST gap policy SHIFT, repeat policy FIRST)" {
		t.Fatalf("%+v", got)
	}
}

func TestLatenessChart(t *testing.T) {
	at := func(l time.Duration) *sundialv1.ExecutionAttempt {
		return &sundialv1.ExecutionAttempt{Lateness: durationpb.New(l), StartedTime: timestamppb.Now()}
	}
	// Newest first, as the ledger lists them.
	c := latenessChart([]*sundialv1.ExecutionAttempt{at(2 * time.Millisecond), {Reason: "skipped: paused"}, at(4 * time.Millisecond), at(0)})
	if c == nil || c.N != 3 || c.Points != "0.0,120.0 300.0,0.0 600.0,60.0" || c.Max != "4ms" {
		t.Fatalf("%+v", c)
	}
	if latenessChart([]*sundialv1.ExecutionAttempt{at(time.Millisecond)}) != nil {
		t.Fatal("one point is no chart")
	}
}

// The history's error excerpt is one line, cut at excerptRunes runes
// (not bytes: a multi-byte character is never split).
func TestExcerpt(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"dial tcp 10.0.0.7:443: connect: connection refused", "dial tcp 10.0.0.7:443: connect: connection refused"},
		{"HTTP 503\n\t<html>\n  <body>down</body>", "HTTP 503 <html> <body>down</body>"},
		{strings.Repeat("é", excerptRunes+5), strings.Repeat("é", excerptRunes) + "…"},
		{strings.Repeat("x", excerptRunes), strings.Repeat("x", excerptRunes)},
	} {
		if got := excerpt(tc.in); got != tc.want {
			t.Errorf("excerpt(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The backfill bounds: the picker's value (with or without seconds) as
// UTC, or RFC 3339 with its offset; anything else is refused.
func TestParseRangeEnd(t *testing.T) {
	want := time.Date(2026, 11, 20, 6, 30, 0, 0, time.UTC)
	for _, in := range []string{"2026-11-20T06:30:00", "2026-11-20T06:30", "2026-11-20T06:30:00Z", "2026-11-20T07:30:00+01:00", "2026-11-20T06:30:00.4Z"} {
		if got, ok := parseRangeEnd(in); !ok || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("parseRangeEnd(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "yesterday", "2026-11-20", "20/11/2026 06:30", "2026-11-20 06:30:00"} {
		if got, ok := parseRangeEnd(in); ok {
			t.Errorf("parseRangeEnd(%q) = %v, want refused", in, got)
		}
	}
}
