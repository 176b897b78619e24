package rangeleader

import (
	"slices"
	"sort"
)

// Assign is the target owner of every range, given the live members in
// join order (lowest ZooKeeper sequence first) and the current owner of
// each range that has one (a range absent from owners is free). Every
// member computes it from the same snapshot of ZooKeeper, so they agree on
// it without talking to each other.
//
// It balances (each member gets R/n ranges, some one more) and moves only
// what it must:
//
//   - a range stays with its live owner while that owner is within its
//     quota; an owner above its quota keeps its lowest-numbered ranges;
//   - the extra ranges (R mod n) go to the members holding the most (counted
//     up to R/n+1, ties to the earliest joined), so an
//     already balanced assignment is a fixed point;
//   - free ranges (a member left, or one gave ranges up) go to the member
//     with the most room, ties to the earliest joined.
//
// So a member leaving moves only its own ranges, and one joining takes
// only its share from the members above their new quota. Owners that are
// not live members (a snapshot race: the lock is read after its member's
// node was) are treated as absent; their lock still keeps anyone else from
// taking the range until it goes.
func Assign(ranges int, members []string, owners map[int]string) map[int]string {
	n := len(members)
	out := make(map[int]string, ranges)
	if n == 0 || ranges <= 0 {
		return out
	}
	order := make(map[string]int, n)
	for i, m := range members {
		order[m] = i
	}
	held := make(map[string][]int, n)
	for r := 0; r < ranges; r++ {
		if o, ok := owners[r]; ok {
			if _, live := order[o]; live {
				held[o] = append(held[o], r)
			}
		}
	}
	// Quotas: R/n each, plus one for the R mod n members holding the most
	// (ties to the earliest joined), so whoever already has an extra keeps it.
	// Holdings count up to R/n+1 only: a member still above that (giving
	// ranges up after a join) ties with one already down to it, so the
	// extra does not flip to whichever has released less when the members
	// reconcile one after the other. Flipping would send a range one member
	// released to the other instead of the newcomer (a move between two
	// members that keep their places).
	byHeld := slices.Clone(members)
	capped := func(m string) int { return min(len(held[m]), ranges/n+1) }
	sort.SliceStable(byHeld, func(i, j int) bool { return capped(byHeld[i]) > capped(byHeld[j]) })
	quota := make(map[string]int, n)
	for i, m := range byHeld {
		quota[m] = ranges / n
		if i < ranges%n {
			quota[m]++
		}
	}
	load := make(map[string]int, n)
	for _, m := range members {
		keep := held[m] // ascending: ranges were visited in order
		if len(keep) > quota[m] {
			keep = keep[:quota[m]]
		}
		for _, r := range keep {
			out[r] = m
		}
		load[m] = len(keep)
	}
	for r := 0; r < ranges; r++ {
		if _, ok := out[r]; ok {
			continue
		}
		best := ""
		for _, m := range members {
			if load[m] >= quota[m] {
				continue
			}
			if best == "" || quota[m]-load[m] > quota[best]-load[best] {
				best = m
			}
		}
		out[r] = best // quotas sum to ranges, so some member has room
		load[best]++
	}
	return out
}

// Bounds are the partitions [Lo, Hi] of range r when partitions are split
// into ranges contiguous ranges of equal size (ranges must divide
// partitions).
func Bounds(r, ranges, partitions int) (lo, hi int) {
	size := partitions / ranges
	return r * size, (r+1)*size - 1
}
