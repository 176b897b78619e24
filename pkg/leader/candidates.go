package leader

import (
	"sort"
	"strconv"
	"strings"
	"time"
)

// candidatePrefix ends every candidate node's name before ZooKeeper's
// sequence suffix. CreateProtectedEphemeralSequential puts "_c_<guid>-" in
// front of it, so names do not sort by creation order: the sequence does.
const candidatePrefix = "n_"

// seqDigits is the width of ZooKeeper's sequence suffix (%010d).
const seqDigits = 10

type candidate struct {
	name string // child name under the election path
	seq  int64
}

// parseCandidate extracts the sequence of a child created by this package;
// ok is false for any other child (stray nodes are ignored, not fatal).
func parseCandidate(name string) (candidate, bool) {
	if len(name) < len(candidatePrefix)+seqDigits {
		return candidate{}, false
	}
	suffix := name[len(name)-seqDigits:]
	if !strings.HasSuffix(name[:len(name)-seqDigits], candidatePrefix) {
		return candidate{}, false
	}
	// The server formats a signed 32-bit counter; after 2^31 creations it
	// wraps negative ("-000000001" style), which ParseInt accepts.
	seq, err := strconv.ParseInt(suffix, 10, 64)
	if err != nil {
		return candidate{}, false
	}
	return candidate{name: name, seq: seq}, true
}

// sortCandidates keeps the children created by this package, ordered by
// sequence (creation order).
func sortCandidates(children []string) []candidate {
	out := make([]candidate, 0, len(children))
	for _, c := range children {
		if cand, ok := parseCandidate(c); ok {
			out = append(out, cand)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// position finds name among the sorted candidates and returns its
// predecessor ("" when name is first). found is false when name is absent:
// the node was deleted (its session expired) and a fresh one is needed.
func position(cands []candidate, name string) (predecessor string, found bool) {
	for i, c := range cands {
		if c.name == name {
			if i == 0 {
				return "", true
			}
			return cands[i-1].name, true
		}
	}
	return "", false
}

// baseName is the last element of a znode path.
func baseName(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// trustDeadline is how long a leader may act on a confirmation of its
// session sent at confirmed: the server expires a session timeout after it
// last heard from the client, and it heard the confirming request no
// earlier than it was sent, so the session (and our node) cannot have been
// expired before confirmed+timeout. The margin absorbs timer lateness, GC
// pauses and clock-rate differences between the two machines.
func trustDeadline(confirmed time.Time, timeout, margin time.Duration) time.Time {
	return confirmed.Add(timeout - margin)
}
