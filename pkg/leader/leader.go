package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/lifecycle"
)

// Reasons a term ends, available as context.Cause(term.Ctx).
var (
	// ErrConnectionLost: the client lost its connection to ZooKeeper. The
	// session may still be alive, but nobody can confirm it, so the leader
	// stops before the server could have expired it.
	ErrConnectionLost = errors.New("leader: zookeeper connection lost")
	// ErrSessionExpired: the server expired the session; another candidate
	// may already lead.
	ErrSessionExpired = errors.New("leader: zookeeper session expired")
	// ErrTrustLapsed: no heartbeat confirmed the session within the trust
	// window (lastConfirmed + session timeout - safety margin).
	ErrTrustLapsed = errors.New("leader: trust window lapsed")
	// ErrNodeLost: the candidate node disappeared or belongs to another
	// session.
	ErrNodeLost = errors.New("leader: candidate node lost")
	// ErrStopped: Stop was called.
	ErrStopped = errors.New("leader: elector stopped")
)

// Term is one continuous period of leadership.
type Term struct {
	// Epoch is the czxid of the candidate node that won: the ZooKeeper
	// transaction id of its creation. Zxids are totally ordered across the
	// whole ensemble and never reused, and a candidate can only lead once
	// every candidate created before it is gone, so a later leader always
	// has a larger epoch than an earlier one, whatever happened to the
	// election path in between. Stores fence writes with it (see DESIGN.md).
	// A term resumed by the same node after a connection blip has the same
	// epoch as the term before it.
	Epoch int64
	// Ctx is cancelled when the term ends; context.Cause tells why (one of
	// the Err* values above). Work done for the term must stop with it.
	Ctx context.Context
	// Node is the candidate node's path, for logs.
	Node string
}

// Config configures an Elector. Zero fields take the defaults noted.
type Config struct {
	// Servers are ZooKeeper host:port addresses.
	Servers []string
	// Path is the election's znode, e.g. /sundial/elections/prefetcher;
	// created (persistent) if missing. One path, one election.
	Path string
	// NodeID names this candidate; stored as the node's data so operators
	// can see who leads.
	NodeID string
	// SessionTimeout requested from ZooKeeper; default 4s. A standby takes
	// over roughly this long after a leader dies without closing its
	// session (kill -9, partition).
	SessionTimeout time.Duration
	// SafetyMargin is subtracted from the session timeout to get the trust
	// window; default a quarter of the session timeout.
	SafetyMargin time.Duration
	// HeartbeatInterval between session confirmations while leading (and
	// retries while suspect); default a quarter of the session timeout.
	HeartbeatInterval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Clock for heartbeats and the trust window; default clock.Real.
	Clock clock.Clock
	// OnTransition, if set, is called after every state change (for
	// metrics). Calls are serialised but may come from the client's event
	// goroutine or the trust guard (a step-down is announced at once, even
	// while the loop is blocked in a ZooKeeper call); it must not block.
	OnTransition func(from, to State, epoch int64)
	// Dialer, if set, replaces net.DialTimeout for ZooKeeper connections:
	// a TLS dialer (see Security), or a test's that partitions a
	// candidate from ZooKeeper.
	Dialer zk.Dialer
	// Credentials are added to the session (AddAuth) before the elector's
	// first request, so nodes whose ACLs admit only them can be used; a
	// digest credential is also the identity every node the elector
	// creates admits (NodeACL: it alone may change them, the world may
	// read), and Check tightens a world-writable tree to it. The client
	// itself sends them again on every reconnection, a new session's
	// included (go-zookeeper v1.0.4 conn.go: loop calls resendZkAuth after
	// each authenticate).
	Credentials []Credential
}

// Credential is one AddAuth: a scheme ("digest") and its payload
// ("user:password" for digest). Payload is secret; it is never logged.
type Credential struct {
	Scheme  string
	Payload []byte
}

func (c *Config) setDefaults() {
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 4 * time.Second
	}
	if c.SafetyMargin == 0 {
		c.SafetyMargin = c.SessionTimeout / 4
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.SessionTimeout / 4
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
}

// Validate reports every problem with the (defaulted) configuration.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Servers) == 0 {
		errs = append(errs, errors.New("servers: at least one ZooKeeper address is required"))
	}
	if !strings.HasPrefix(c.Path, "/") || c.Path == "/" || strings.HasSuffix(c.Path, "/") || strings.Contains(c.Path, "//") {
		errs = append(errs, fmt.Errorf("path: %q is not an absolute znode path below the root", c.Path))
	}
	if c.NodeID == "" {
		errs = append(errs, errors.New("node id: must not be empty"))
	}
	for i, cr := range c.Credentials {
		if cr.Scheme == "" || len(cr.Payload) == 0 {
			errs = append(errs, fmt.Errorf("credentials[%d]: scheme and payload are required", i))
		} else if _, _, ok := digestUser(cr); cr.Scheme == "digest" && !ok {
			errs = append(errs, fmt.Errorf("credentials[%d]: a digest payload is user:password", i))
		}
	}
	if c.SessionTimeout <= 0 {
		errs = append(errs, fmt.Errorf("session timeout: must be positive, got %s", c.SessionTimeout))
	}
	if c.SafetyMargin <= 0 || c.SafetyMargin >= c.SessionTimeout {
		errs = append(errs, fmt.Errorf("safety margin: must be in (0, %s), got %s", c.SessionTimeout, c.SafetyMargin))
	}
	if window := c.SessionTimeout - c.SafetyMargin; c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= window {
		errs = append(errs, fmt.Errorf("heartbeat interval: must be in (0, %s) so a leader confirms its session inside the trust window, got %s", window, c.HeartbeatInterval))
	}
	return errors.Join(errs...)
}

// Elector campaigns for leadership of one election path. It implements
// lifecycle.Service; terms are delivered on Terms.
type Elector struct {
	cfg    Config
	log    *slog.Logger
	clk    clock.Clock
	zlog   *zkLogger
	acl    []zk.ACL // of every node it creates (NodeACL)
	runner lifecycle.Runner
	terms  chan Term
	state  atomic.Int32 // State, for State() from any goroutine

	conn   *zk.Conn
	events <-chan zk.Event // closed when the client's goroutines have exited

	// Owned by the loop goroutine.
	cur          State
	node         string // full path of our candidate node; "" when none
	nodeSession  int64  // session that owns node
	epoch        int64  // czxid of node
	watch        <-chan zk.Event
	pathReady    bool
	orphanRisk   bool  // a create failed ambiguously: a node of ours may exist unknown
	orphanSessID int64 // ...in this session
	authAdded    bool  // Credentials are on the client, which replays them itself

	// Shared between the loop, the guard and the client's callback.
	mu           sync.Mutex
	queue        []event
	wake         chan struct{} // cap 1: queue not empty
	guardWake    chan struct{} // cap 1: term or trust deadline changed
	sessionUp    bool
	termCancel   context.CancelCauseFunc // non-nil while a term is open
	trustedUntil time.Time
	reported     State // last state announced (logs, hook, State())
	termEpoch    int64 // of the open term, for announcements off the loop
	termNode     string
}

// New validates cfg and returns an elector; Start connects.
func New(cfg Config) (*Elector, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("leader: invalid config: %w", err)
	}
	log := cfg.Logger.With("election", cfg.Path, "node_id", cfg.NodeID)
	return &Elector{
		cfg:       cfg,
		log:       log,
		clk:       cfg.Clock,
		zlog:      &zkLogger{logger: log},
		acl:       NodeACL(cfg.Credentials),
		terms:     make(chan Term, 1),
		wake:      make(chan struct{}, 1),
		guardWake: make(chan struct{}, 1),
	}, nil
}

// Terms delivers each new term. It holds at most one: a term not yet
// received when the next one opens has already been cancelled and is
// replaced. Handle terms one at a time, returning from a term's work only
// once it has stopped, so two terms never overlap in this process.
func (e *Elector) Terms() <-chan Term { return e.terms }

// State is the elector's current state.
func (e *Elector) State() State { return State(e.state.Load()) }

// Check reports whether the elector holds a ZooKeeper session; it is the
// readiness check of a service that depends on the election.
func (e *Elector) Check(context.Context) error {
	if e.conn == nil {
		return errors.New("zookeeper: not started")
	}
	if s := e.conn.State(); s != zk.StateHasSession {
		return fmt.Errorf("zookeeper: %s", s)
	}
	return nil
}

// SessionTimeout is the timeout the elector trusts: the configured one, or
// the smaller one the server negotiated.
func (e *Elector) SessionTimeout() time.Duration {
	return effectiveTimeout(e.cfg.SessionTimeout, time.Duration(e.zlog.negotiated.Load()))
}

// Start connects to ZooKeeper and starts campaigning in the background. It
// does not wait for a session: the client keeps retrying, and Check tells
// when it has one.
func (e *Elector) Start(ctx context.Context) error {
	if e.conn != nil {
		return lifecycle.ErrAlreadyStarted
	}
	dialer := e.cfg.Dialer
	if dialer == nil {
		dialer = net.DialTimeout
	}
	conn, events, err := zk.Connect(e.cfg.Servers, e.cfg.SessionTimeout,
		zk.WithEventCallback(e.onEvent), zk.WithLogger(e.zlog), zk.WithDialer(dialer))
	if err != nil {
		return fmt.Errorf("leader: connect %v: %w", e.cfg.Servers, err)
	}
	e.conn, e.events = conn, events
	if err := e.runner.Run(e.run); err != nil {
		e.closeConn()
		return err
	}
	return nil
}

// Stop ends any open term, closes the session (which deletes the candidate
// node at once, so a standby takes over without waiting for a timeout) and
// waits for every goroutine, the client's included.
func (e *Elector) Stop() { e.runner.Stop() }

// onEvent is the client's event callback. The client drops events when its
// channel is full, so the elector never reads that channel; this callback
// runs on the client's goroutine and must not block, so it only records the
// event and, on a lost connection or session, cancels the open term at once
// rather than waiting for the loop (which may be blocked in a call).
func (e *Elector) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch ev.State {
	case zk.StateHasSession:
		e.sessionUp = true
		e.pushLocked(evSession)
	case zk.StateDisconnected:
		e.sessionUp = false
		e.stepDownLocked(evDisconnected)
		e.pushLocked(evDisconnected)
	case zk.StateExpired:
		e.sessionUp = false
		e.stepDownLocked(evExpired)
		e.pushLocked(evExpired)
	}
}

// stepDownLocked ends the open term, if any, and announces the state the
// loop will reach when it processes ev, without waiting for the loop.
func (e *Elector) stepDownLocked(ev event) {
	if e.termCancel == nil {
		return
	}
	epoch, node := e.termEpoch, e.termNode
	e.endTermLocked(causeOf(ev))
	e.announceLocked(transition(StateLeading, ev), ev.String(), epoch, node)
}

func (e *Elector) pushLocked(ev event) {
	e.queue = append(e.queue, ev)
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Elector) endTermLocked(cause error) {
	if e.termCancel != nil {
		e.termCancel(cause)
		e.termCancel = nil
		signal(e.guardWake)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (e *Elector) run(ctx context.Context) error {
	guardCtx, stopGuard := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.guard(guardCtx)
	}()
	defer func() {
		e.apply(evStop)
		stopGuard()
		wg.Wait()
		e.closeConn()
	}()

	e.setState(StateConnecting, "start")
	hb := e.clk.NewTimer(e.cfg.HeartbeatInterval)
	defer hb.Stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		// Queued session events first: they may invalidate a campaign.
		select {
		case <-e.wake:
			e.drain()
		default:
		}
		if e.cur == StateCampaigning {
			e.apply(e.campaign())
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-e.wake:
			e.drain()
		case <-e.watch:
			// Deleted, or the watch was invalidated (the session ended):
			// either way, read the candidates again.
			e.watch = nil
			e.apply(evPredecessorGone)
		case <-hb.C():
			hb.Reset(e.cfg.HeartbeatInterval)
			e.tick()
		}
	}
}

func (e *Elector) drain() {
	e.mu.Lock()
	q := e.queue
	e.queue = nil
	e.mu.Unlock()
	for _, ev := range q {
		e.apply(ev)
	}
}

// apply moves the state machine and performs the effects of the edge.
func (e *Elector) apply(ev event) {
	from := e.cur
	to := transition(from, ev)
	if from == StateLeading && to != StateLeading {
		e.mu.Lock()
		e.endTermLocked(causeOf(ev))
		e.mu.Unlock()
	}
	var term *Term
	if to == StateLeading && from != StateLeading {
		if term = e.beginTerm(); term == nil {
			// The session was lost, or the confirmation went stale, between
			// the campaign's read and now: do not lead on it.
			to = StateSuspect
		}
	}
	if to != StateFollowing {
		e.watch = nil
	}
	e.setState(to, ev.String())
	switch ev {
	case evExpired, evNodeLost, evStop:
		// After the announcement, so its log line still names the node.
		e.forgetNode()
	}
	if term != nil {
		// Published after the state is announced, so a consumer holding a
		// term never sees State() say otherwise (until the term ends).
		e.publish(*term)
	}
}

func (e *Elector) setState(to State, why string) {
	e.cur = to
	e.mu.Lock()
	e.announceLocked(to, why, e.epoch, e.node)
	e.mu.Unlock()
}

// announceLocked publishes a state change once: to State(), the log and
// the hook.
func (e *Elector) announceLocked(to State, why string, epoch int64, node string) {
	from := e.reported
	if from == to {
		return
	}
	e.reported = to
	e.state.Store(int32(to))
	level := slog.LevelInfo
	if from == StateLeading {
		level = slog.LevelWarn
	}
	e.log.Log(context.Background(), level, "leader election state changed",
		"from", from.String(), "to", to.String(), "event", why, "epoch", epoch, "node", node)
	if e.cfg.OnTransition != nil {
		e.cfg.OnTransition(from, to, epoch)
	}
}

func causeOf(ev event) error {
	switch ev {
	case evDisconnected:
		return ErrConnectionLost
	case evExpired:
		return ErrSessionExpired
	case evTrustLapsed:
		return ErrTrustLapsed
	case evStop:
		return ErrStopped
	default:
		return ErrNodeLost
	}
}

// beginTerm opens a term if the session is up and the campaign's
// confirmation is still inside the trust window; nil otherwise.
func (e *Elector) beginTerm() *Term {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.sessionUp || !e.clk.Now().Before(e.trustedUntil) || e.node == "" {
		return nil
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	e.termCancel = cancel
	e.termEpoch, e.termNode = e.epoch, e.node
	signal(e.guardWake)
	e.log.Info("leadership term began", "epoch", e.epoch, "node", e.node, "trusted_until", e.trustedUntil)
	return &Term{Epoch: e.epoch, Ctx: ctx, Node: e.node}
}

// publish hands a term to the consumer. Only the loop sends, so after
// discarding an unread (already cancelled) term the send cannot block.
func (e *Elector) publish(t Term) {
	select {
	case <-e.terms:
	default:
	}
	e.terms <- t
}

// confirm records that the session was alive when a request sent at sent
// succeeded, and moves the trust deadline accordingly.
func (e *Elector) confirm(sent time.Time) {
	e.mu.Lock()
	e.trustedUntil = trustDeadline(sent, e.SessionTimeout(), e.cfg.SafetyMargin)
	e.mu.Unlock()
	signal(e.guardWake)
}

// guard cancels the open term when its trust deadline passes without a
// newer confirmation. It runs apart from the loop because the loop may be
// blocked in a ZooKeeper call for up to two thirds of the session timeout
// (the client's read deadline) when the network silently drops packets.
func (e *Elector) guard(ctx context.Context) {
	for {
		e.mu.Lock()
		open, until := e.termCancel != nil, e.trustedUntil
		e.mu.Unlock()
		var t clock.Timer
		var fire <-chan time.Time
		if open {
			t = e.clk.NewTimer(until.Sub(e.clk.Now()))
			fire = t.C()
		}
		select {
		case <-ctx.Done():
			if t != nil {
				t.Stop()
			}
			return
		case <-e.guardWake:
		case <-fire:
			e.mu.Lock()
			if e.termCancel != nil && !e.clk.Now().Before(e.trustedUntil) {
				e.log.Warn("leader trust window lapsed, stepping down", "trusted_until", e.trustedUntil)
				e.stepDownLocked(evTrustLapsed)
				e.pushLocked(evTrustLapsed)
			}
			e.mu.Unlock()
		}
		if t != nil {
			t.Stop()
		}
	}
}

// tick is the heartbeat: a leader confirms its session (extending trust);
// a suspect candidate with a session re-verifies its node.
func (e *Elector) tick() {
	switch e.cur {
	case StateLeading:
		if ev := e.verify(); ev != evFailed {
			e.apply(ev)
		}
		// A failed heartbeat changes nothing by itself: the trust window
		// (or a disconnect event) decides when to step down.
	case StateSuspect:
		if e.conn.State() == zk.StateHasSession {
			e.apply(e.verify())
		}
	}
}

// verify checks that our node still exists and belongs to the current
// session; success confirms the session as of the request's send time.
func (e *Elector) verify() event {
	if e.node == "" {
		return evNodeLost
	}
	sent := e.clk.Now()
	sid := e.conn.SessionID()
	ok, st, err := e.conn.Exists(e.node)
	if err != nil {
		e.log.Debug("candidate heartbeat failed", "err", err)
		return evFailed
	}
	if !ok || st.EphemeralOwner != e.nodeSession || sid != e.nodeSession {
		return evNodeLost
	}
	e.confirm(sent)
	return evConfirmed
}

// campaign makes sure we have a live candidate node in the current session
// and finds our place among the candidates: first leads, any other watches
// only its predecessor.
func (e *Elector) campaign() event {
	if e.conn.State() != zk.StateHasSession {
		return evFailed
	}
	if !e.authAdded {
		if err := e.addAuth(); err != nil {
			e.log.Warn("adding zookeeper credentials failed", "err", err)
			return evFailed
		}
		e.authAdded = true
	}
	if e.node == "" {
		if err := e.createNode(e.conn.SessionID()); err != nil {
			e.log.Warn("creating candidate node failed", "err", err)
			return evFailed
		}
	}
	ok, st, err := e.conn.Exists(e.node)
	if err != nil {
		return evFailed
	}
	if !ok || st.EphemeralOwner != e.conn.SessionID() {
		// Created by a session that has since expired: the server deleted
		// it (or will). Start over with a fresh node in this session.
		return evNodeLost
	}
	e.epoch, e.nodeSession = st.Czxid, st.EphemeralOwner
	for {
		sent := e.clk.Now()
		children, _, err := e.conn.Children(e.cfg.Path)
		if err != nil {
			return evFailed
		}
		pred, found := position(sortCandidates(children), baseName(e.node))
		if !found {
			return evNodeLost
		}
		if pred == "" {
			e.confirm(sent)
			return evElected
		}
		exists, _, ch, err := e.conn.ExistsW(e.cfg.Path + "/" + pred)
		if err != nil {
			return evFailed
		}
		if !exists {
			continue // the predecessor left between the two reads
		}
		e.watch = ch
		e.log.Debug("following", "predecessor", pred)
		return evStandby
	}
}

// addAuth hands the credentials to the client. It is done once, in the
// first campaign rather than in Start: AddAuth waits for a session, and
// Start does not; and the loop issues no request before a campaign, so
// nothing reaches the server unauthenticated.
func (e *Elector) addAuth() error {
	for _, c := range e.cfg.Credentials {
		if err := e.conn.AddAuth(c.Scheme, c.Payload); err != nil {
			// The error is the client's (connection closed...), never the
			// payload; a retry may add one credential twice, which the
			// server treats as one.
			return fmt.Errorf("add %s credentials: %w", c.Scheme, err)
		}
	}
	return nil
}

func (e *Elector) createNode(sid int64) error {
	if !e.pathReady {
		if err := e.ensurePath(); err != nil {
			return err
		}
		e.pathReady = true
	}
	if e.orphanRisk && e.orphanSessID == sid {
		if err := e.removeOrphans(sid); err != nil {
			return err
		}
	}
	e.orphanRisk = false
	path, err := e.conn.CreateProtectedEphemeralSequential(e.cfg.Path+"/"+candidatePrefix, []byte(e.cfg.NodeID), e.acl)
	if err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			e.pathReady = false // someone deleted the election path
		} else {
			// The create may have happened with its reply lost (the
			// client's own GUID search needs a connection too).
			e.orphanRisk, e.orphanSessID = true, sid
		}
		return err
	}
	e.node = path
	return nil
}

// removeOrphans deletes candidate nodes owned by session sid other than
// the current one, left by a create whose reply was lost. An unknown node of
// ours would otherwise sit in line until the session ends, and if it were
// lowest nobody would lead.
func (e *Elector) removeOrphans(sid int64) error {
	children, _, err := e.conn.Children(e.cfg.Path)
	if err != nil {
		return err
	}
	for _, c := range sortCandidates(children) {
		p := e.cfg.Path + "/" + c.name
		if p == e.node {
			continue
		}
		ok, st, err := e.conn.Exists(p)
		if err != nil {
			return err
		}
		if ok && st.EphemeralOwner == sid {
			e.log.Warn("deleting orphaned candidate node", "orphan", p)
			if err := e.conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
		}
	}
	return nil
}

func (e *Elector) ensurePath() error {
	parts := strings.Split(strings.TrimPrefix(e.cfg.Path, "/"), "/")
	p := ""
	for _, part := range parts {
		p += "/" + part
		// Parents that exist are left as they are (they may not be
		// Sundial's); those created here get the elector's ACL too.
		_, err := e.conn.Create(p, nil, 0, e.acl)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", p, err)
		}
	}
	return nil
}

func (e *Elector) forgetNode() {
	e.node, e.nodeSession, e.epoch, e.watch = "", 0, 0, nil
}

// closeConn closes the session and waits (bounded) for the client's
// goroutines, which close the event channel as they exit.
func (e *Elector) closeConn() {
	e.conn.Close()
	t := e.clk.NewTimer(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case _, ok := <-e.events:
			if !ok {
				return
			}
		case <-t.C():
			e.log.Warn("zookeeper client did not shut down in time")
			return
		}
	}
}
