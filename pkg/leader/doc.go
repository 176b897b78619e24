// Package leader elects one leader among the processes campaigning on a
// ZooKeeper path, and hands the winner leadership terms whose end it
// signals conservatively: as soon as the process can no longer be sure
// ZooKeeper still considers it the leader.
//
// go-zookeeper/zk ships no election recipe, and the obvious one (create an
// ephemeral node, see if it is first) is wrong in ways that only show under
// failure. This package is the recipe with those failures designed in.
// DESIGN.md beside this file has the full argument; this is the summary.
//
// # Candidates
//
// Each elector creates one candidate node under the election path with
// CreateProtectedEphemeralSequential. The protection (a GUID in the name)
// lets the client find a node whose create reply was lost; the sequence
// orders the candidates. Names start with the GUID, so candidates are sorted
// by their sequence suffix, never by name. The lowest sequence leads. Every
// other candidate watches only its immediate predecessor, so a leader's
// exit wakes one follower, not all of them (no herd).
//
// # State model
//
//	            Start
//	              │
//	              ▼
//	┌──────────────────────────┐  expired (any state)
//	│        Connecting        │◀───────────────────────────┐
//	│  no session, no node     │                            │
//	└────────────┬─────────────┘                            │
//	             │ session                                  │
//	             ▼                                          │
//	┌──────────────────────────┐   standby   ┌───────────────────────────┐
//	│       Campaigning        │────────────▶│         Following         │
//	│ create/verify node, read │◀────────────│ watch predecessor only    │
//	│ candidates               │ pred. gone  └───────────────────────────┘
//	└──┬──────────▲────────┬───┘                   │ disconnected
//	   │ elected  │ node   │ call failed           ▼
//	   ▼          │ lost   │             ┌───────────────────────────┐
//	┌─────────────┴────────┴───┐         │          Suspect          │
//	│         Leading          │────────▶│ node kept, not leading;   │
//	│ term open; heartbeats    │ disconn.│ re-verify once connected  │
//	│ extend the trust window  │ / trust │───▶ Campaigning           │
//	└──────────────────────────┘ lapsed  └───────────────────────────┘
//
// Only Campaigning can lead to Leading, and only when our node is the
// lowest; Stop leads from anywhere to Stopped. The transition function is
// pure and tested exhaustively (machine.go).
//
// # Trust window
//
// ZooKeeper decides leadership, but a client learns that its session
// expired only when it reconnects, possibly long after the server deleted
// its node and a standby took over. So a leader acts only within a window
// it can prove: every successful request confirms that the session was
// alive when the request was sent, and the server cannot expire a session
// until a session timeout after it last heard from the client. After each
// confirmation (a heartbeat every quarter session timeout, by default)
//
//	trustedUntil = sent + sessionTimeout - safetyMargin
//
// and a guard goroutine ends the term when trustedUntil passes without a
// newer confirmation. The session timeout used is the smaller of the one
// requested and the one the server negotiated. A "disconnected" event ends
// the term at once: the session is only suspect, not dead, but nobody can
// confirm it any more.
//
// Ending a term never waits for the elector's own loop, which may be blocked
// in a ZooKeeper call: the event callback and the guard cancel the term and
// announce the step-down themselves.
//
// # Sessions
//
// The client drops events when its channel holds six unread, so the elector
// uses the event callback and never reads the channel. After an expiry the
// client silently opens a new session; every ephemeral node and watch of
// the old one is gone, so the elector forgets its node and campaigns with a
// fresh one. After a mere disconnection the session (and the node) may have
// survived: the elector keeps the node, verifies it once reconnected, and
// leads again if it is still lowest.
//
// Credentials (Config.Credentials, a digest user) are added once, in the
// first campaign, before any other request; the client replays them itself
// after every reconnection, a new session's included, so the elector never
// adds them again. A digest user is also the identity of every node the
// elector creates (NodeACL: it may do everything, the world only read), so
// no other client can add a candidate, delete the leader's node or change
// an ACL; Check, the prefetcher's startup check, gives a tree left
// world-writable that ACL (Tighten) and refuses one that admits another
// identity only. pkg/rangeleader creates its nodes with the same ACL.
//
// # Terms and epochs
//
// A Term carries Epoch, the czxid of the winning candidate node, and a
// context cancelled when the term ends (context.Cause says why). Zxids are
// totally ordered and never reused by an ensemble, and a candidate leads
// only after every earlier candidate is gone, so epochs increase from one
// leader to the next; a store that rejects writes from epochs older than
// the newest it has seen (Sundial's leader_epochs row) fences off a
// deposed leader that has not noticed yet. This fencing, not the trust
// window, is what makes a paused or partitioned leader harmless; the
// window only keeps it from trying.
package leader
