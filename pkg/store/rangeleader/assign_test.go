package rangeleader

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func members(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("m%d", i)
	}
	return out
}

func counts(a map[int]string) map[string]int {
	c := map[string]int{}
	for _, m := range a {
		c[m]++
	}
	return c
}

// requireBalanced: every range has one live owner, and loads differ by at
// most one.
func requireBalanced(t *testing.T, ranges int, ms []string, a map[int]string) {
	t.Helper()
	require.Len(t, a, ranges)
	for r := 0; r < ranges; r++ {
		require.Contains(t, ms, a[r], "range %d", r)
	}
	c := counts(a)
	lo, hi := ranges, 0
	for _, m := range ms {
		lo, hi = min(lo, c[m]), max(hi, c[m])
	}
	require.LessOrEqual(t, hi-lo, 1, "loads %v", c)
}

func moved(before, after map[int]string) int {
	n := 0
	for r, m := range after {
		if before[r] != m {
			n++
		}
	}
	return n
}

func TestAssignFromNothingIsBalanced(t *testing.T) {
	for _, ranges := range []int{1, 16, 17, 256} {
		for n := 1; n <= 7; n++ {
			a := Assign(ranges, members(n), nil)
			requireBalanced(t, ranges, members(n), a)
		}
	}
}

func TestAssignNoMembersAssignsNothing(t *testing.T) {
	require.Empty(t, Assign(16, nil, map[int]string{0: "gone"}))
}

func TestAssignIsAFixedPoint(t *testing.T) {
	for n := 1; n <= 7; n++ {
		a := Assign(16, members(n), nil)
		require.Equal(t, a, Assign(16, members(n), a), "n=%d", n)
	}
}

func TestAssignLeaveMovesOnlyTheLeaversRanges(t *testing.T) {
	for n := 2; n <= 6; n++ {
		ms := members(n)
		a := Assign(16, ms, nil)
		for leaver := range ms {
			rest := append(append([]string{}, ms[:leaver]...), ms[leaver+1:]...)
			b := Assign(16, rest, a)
			requireBalanced(t, 16, rest, b)
			for r, m := range a {
				if m != ms[leaver] {
					require.Equal(t, m, b[r], "n=%d leaver=%d: range %d of a staying member moved", n, leaver, r)
				}
			}
		}
	}
}

func TestAssignJoinMovesOnlyTheJoinersShare(t *testing.T) {
	for n := 1; n <= 6; n++ {
		ms := members(n)
		a := Assign(16, ms, nil)
		joined := members(n + 1)
		b := Assign(16, joined, a)
		requireBalanced(t, 16, joined, b)
		// Everything that moved went to the newcomer, and it got no more
		// than its share.
		for r, m := range b {
			if a[r] != m {
				require.Equal(t, joined[n], m, "n=%d: range %d moved between old members", n, r)
			}
		}
		require.Equal(t, counts(b)[joined[n]], moved(a, b))
		require.LessOrEqual(t, moved(a, b), 16/(n+1)+1)
	}
}

// During a handover the locks are in between: some ranges free, some held
// by a member above its new quota. Every snapshot still yields a balanced
// target, and applying it converges in one step.
func TestAssignConvergesFromAnySnapshot(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		ranges := 1 + rng.IntN(40)
		ms := members(1 + rng.IntN(6))
		owners := map[int]string{}
		for r := 0; r < ranges; r++ {
			switch rng.IntN(3) {
			case 0: // free
			case 1:
				owners[r] = ms[rng.IntN(len(ms))]
			case 2:
				owners[r] = "departed"
			}
		}
		a := Assign(ranges, ms, owners)
		requireBalanced(t, ranges, ms, a)
		require.Equal(t, a, Assign(ranges, ms, a))
		// A live owner within its quota keeps what it has.
		c := counts(a)
		for r, o := range owners {
			if o != "departed" && a[r] != o {
				kept := 0
				for r2, o2 := range owners {
					if o2 == o && a[r2] == o {
						kept++
					}
				}
				require.Equal(t, c[o], kept, "owner %s lost range %d while below its quota", o, r)
			}
		}
	}
}

func TestBounds(t *testing.T) {
	lo, hi := Bounds(0, 16, 256)
	require.Equal(t, [2]int{0, 15}, [2]int{lo, hi})
	lo, hi = Bounds(15, 16, 256)
	require.Equal(t, [2]int{240, 255}, [2]int{lo, hi})
	lo, hi = Bounds(7, 256, 256)
	require.Equal(t, [2]int{7, 7}, [2]int{lo, hi})
}

func TestSortMembersBySequenceNotName(t *testing.T) {
	got := sortMembers([]string{
		"_c_ffff-m_0000000003", "_c_0000-m_0000000010", "junk", "_c_aaaa-m_0000000001",
	})
	require.Equal(t, []string{"_c_aaaa-m_0000000001", "_c_ffff-m_0000000003", "_c_0000-m_0000000010"}, got)
}

func TestConfigValidate(t *testing.T) {
	c := Config{Servers: []string{"x:1"}, Path: "/a", NodeID: "n", Ranges: 16, Work: func(context.Context, Term) {}}
	c.setDefaults()
	require.NoError(t, c.Validate())
	bad := c
	bad.Ranges, bad.Work, bad.Path = 0, nil, "a/"
	err := bad.Validate()
	require.ErrorContains(t, err, "ranges")
	require.ErrorContains(t, err, "work")
	require.ErrorContains(t, err, "path")
}

// A join seen by the members one after the other: a has already given up
// the two ranges above its new quota, b not yet. The extra range stays
// with a (it still holds its quota plus one), so a keeps what it kept and
// everything released goes to the newcomer; before holdings were capped
// at R/n+1, the extra flipped to b (holding more for the moment), a gave
// up one more, and a later tie could hand a range of b's to a.
func TestAssignKeepsTheExtraWhileMembersReconcileInTurn(t *testing.T) {
	owners := map[int]string{}
	for r := 0; r <= 5; r++ {
		owners[r] = "a"
	}
	for r := 8; r <= 15; r++ {
		owners[r] = "b"
	}
	got := Assign(16, []string{"a", "b", "c"}, owners)
	for r := 0; r <= 5; r++ {
		if got[r] != "a" {
			t.Fatalf("range %d: a keeps its six, got %s (%v)", r, got[r], got)
		}
	}
	for r := 8; r <= 12; r++ {
		if got[r] != "b" {
			t.Fatalf("range %d: b keeps its lowest five, got %s (%v)", r, got[r], got)
		}
	}
	for _, r := range []int{6, 7, 13, 14, 15} {
		if got[r] != "c" {
			t.Fatalf("range %d: goes to the newcomer, got %s (%v)", r, got[r], got)
		}
	}
}
