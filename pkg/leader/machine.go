package leader

import "fmt"

// State is where an Elector is in its state machine; see the package doc
// and DESIGN.md for the diagram.
type State int32

const (
	// StateStopped: not started, or stopped. Terminal after Stop.
	StateStopped State = iota
	// StateConnecting: no ZooKeeper session that could own a candidate node
	// (never had one, or the last one expired). Entered with no node.
	StateConnecting
	// StateCampaigning: a session is up; the elector is creating or
	// re-verifying its candidate node and reading the other candidates.
	StateCampaigning
	// StateFollowing: a candidate with a predecessor; it watches only that
	// predecessor, so one leader's exit wakes one follower, not the herd.
	StateFollowing
	// StateLeading: the lowest candidate, with the session confirmed within
	// the trust window. The only state in which a Term is open.
	StateLeading
	// StateSuspect: the connection was lost, or the trust window lapsed,
	// while the session may still be alive on the server. The candidate
	// node is kept (it may still exist) but the elector does not lead.
	StateSuspect
)

func (s State) String() string {
	switch s {
	case StateStopped:
		return "stopped"
	case StateConnecting:
		return "connecting"
	case StateCampaigning:
		return "campaigning"
	case StateFollowing:
		return "following"
	case StateLeading:
		return "leading"
	case StateSuspect:
		return "suspect"
	default:
		return fmt.Sprintf("State(%d)", int32(s))
	}
}

// event is an input to the state machine. Session events come from the
// ZooKeeper client's callback; the others from the elector's own calls and
// timers.
type event int

const (
	// evSession: the client holds a session (zk StateHasSession), either
	// the old one after a reconnect or a new one after an expiry.
	evSession event = iota
	// evDisconnected: the connection dropped; the session may live on for
	// up to the session timeout, so this is suspicion, not death.
	evDisconnected
	// evExpired: the server told a reconnecting client its session is gone,
	// so every ephemeral node of it, ours included, is deleted.
	evExpired
	// evElected: a campaign found our node lowest.
	evElected
	// evStandby: a campaign found a predecessor and set a watch on it.
	evStandby
	// evPredecessorGone: the watched predecessor was deleted (or its watch
	// was invalidated): re-read the candidates.
	evPredecessorGone
	// evNodeLost: our candidate node no longer exists or belongs to a
	// session that is not the current one.
	evNodeLost
	// evConfirmed: a heartbeat proved the session alive and our node ours.
	evConfirmed
	// evTrustLapsed: no confirmation arrived before the trust deadline.
	evTrustLapsed
	// evFailed: a ZooKeeper call failed for a reason other than the above
	// (timeout, connection closed mid-call); retried after a heartbeat.
	evFailed
	// evStop: Stop was called.
	evStop
)

func (e event) String() string {
	return [...]string{
		"session", "disconnected", "expired", "elected", "standby",
		"predecessor_gone", "node_lost", "confirmed", "trust_lapsed", "failed", "stop",
	}[e]
}

// transition is the whole state machine: the next state for an input. It
// is a pure function so the table can be tested exhaustively without
// ZooKeeper; the elector performs the side effects of entering and leaving
// states (opening and cancelling terms, forgetting the node).
func transition(s State, ev event) State {
	if ev == evStop || s == StateStopped {
		return StateStopped
	}
	// Losing the connection or the session overrides everything: a leader
	// steps down at once, whatever it was doing.
	switch ev {
	case evExpired:
		return StateConnecting
	case evDisconnected:
		if s == StateConnecting {
			return StateConnecting
		}
		return StateSuspect
	}
	switch s {
	case StateConnecting:
		if ev == evSession {
			return StateCampaigning
		}
		return StateConnecting
	case StateCampaigning:
		switch ev {
		case evElected:
			return StateLeading
		case evStandby:
			return StateFollowing
		case evFailed, evTrustLapsed:
			return StateSuspect
		default: // evSession, evNodeLost, evPredecessorGone, evConfirmed: campaign (again)
			return StateCampaigning
		}
	case StateFollowing:
		switch ev {
		case evPredecessorGone, evSession, evNodeLost:
			return StateCampaigning
		case evFailed:
			return StateSuspect
		default:
			return StateFollowing
		}
	case StateLeading:
		switch ev {
		case evConfirmed, evElected, evFailed:
			// A failed call alone changes nothing: the trust window (or a
			// disconnect) decides when a leader steps down.
			return StateLeading
		case evTrustLapsed:
			return StateSuspect
		case evSession, evNodeLost:
			// A session event while leading means the client reconnected
			// without us seeing the disconnect (or under a new session):
			// re-verify before leading again.
			return StateCampaigning
		default:
			return StateLeading
		}
	case StateSuspect:
		switch ev {
		case evSession, evConfirmed, evNodeLost:
			return StateCampaigning
		default:
			return StateSuspect
		}
	}
	return s
}
