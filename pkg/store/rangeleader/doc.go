// Package rangeleader spreads numbered ranges of work (the prefetcher's
// partition ranges) over every live member of a group through ZooKeeper,
// one leader per range, each range leadership with an epoch of its own. A
// single leader is one range: one member leads, the others stand by.
//
// It is Sundial's one coordination engine: an ephemeral node per process,
// a trust window that ends work before the server could have expired the
// session, and an epoch from a czxid that a store uses to fence a deposed
// leader's writes; with them the identity the nodes admit (NodeACL), the
// prefetcher's startup check of its ZooKeeper settings (Check, Tighten)
// and their flags (Security). DESIGN.md beside this file has the full
// argument; this is the summary.
//
// # Layout
//
//	<Path>/members/_c_<guid>-m_0000000007   ephemeral sequential, data = node id
//	<Path>/ranges                           persistent, data = the number of ranges
//	<Path>/ranges/r0003                     ephemeral, data = member name
//
// A member joins by creating its member node and leaves when its session
// ends (Stop closes it at once; a crash lets it expire after the session
// timeout). The lock of range r exists exactly while one member leads r.
// Every member must split the work into the same number of ranges: one
// configured otherwise leads nothing, and its Check fails, while any range
// is locked; with none locked, it records its number and the group goes on
// with it.
//
// # Assignment
//
// Every member reads the members (in join order, by sequence) and the
// locks (who holds what), computes Assign from them, and acts only on its
// own part: it deletes the locks of ranges assigned elsewhere (after its
// work on them has stopped) and creates the locks of free ranges assigned
// to it. Assign is deterministic, so members with the same snapshot agree;
// with different snapshots (mid-change) they may disagree for a moment, and
// the locks decide: a range whose lock exists cannot be taken. Watches on
// both children lists, and a reconciliation every heartbeat, bring every
// member to the new assignment.
//
// Assign keeps each range with its current owner while the owner is within
// its quota (ranges/members, the remainder going to those that hold the
// most), so a leaving member moves only its own ranges and a joining one
// takes only its share, from members above their new quota.
//
// # Epochs
//
// A range's epoch is the czxid of its lock node. The next lock of a range
// can only be created after the previous one is deleted, and zxids grow
// across the whole ensemble, so every later leader of a range has a larger
// epoch. A term resumed on the same lock after a connection blip keeps its
// epoch. Each range fences its own store row, so ranges never fence each
// other.
//
// # Trust window
//
// Each reconciliation reads the members list, which
// succeeds only on a live session and confirms it as of the request's send
// time; trust lasts until sent + session timeout - margin. A guard goroutine
// ends every range's work when trust lapses, and the client's disconnect
// and expiry events end it at once, without waiting for the loop (which may
// be blocked in a call). After a mere disconnect the locks may have
// survived: once reconnected, the member checks each lock still belongs to
// its session and resumes its ranges on the same epochs. After an expiry
// the server has deleted every node of the session: the member joins again
// with a new member node and competes for ranges like a newcomer.
//
// # Goroutines
//
// The coordinator owns them all: its loop (the only one calling
// ZooKeeper), the guard, and one goroutine per led range running
// Config.Work, which is cancelled and waited for before the range's lock
// is deleted and before Stop returns.
package rangeleader
