package rangeleader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// Reasons a range term ends, available as context.Cause of its context.
var (
	// ErrConnectionLost: the connection to ZooKeeper dropped; the session
	// may live on, but nobody can confirm it.
	ErrConnectionLost = errors.New("rangeleader: zookeeper connection lost")
	// ErrSessionExpired: the server expired the session and deleted its
	// locks; other members may lead the ranges already.
	ErrSessionExpired = errors.New("rangeleader: zookeeper session expired")
	// ErrTrustLapsed: no request confirmed the session within the trust
	// window.
	ErrTrustLapsed = errors.New("rangeleader: trust window lapsed")
	// ErrLockLost: the range's lock node is gone or belongs to another
	// session.
	ErrLockLost = errors.New("rangeleader: range lock lost")
	// ErrRebalanced: the assignment gave the range to another member.
	ErrRebalanced = errors.New("rangeleader: range reassigned")
	// ErrStopped: Stop was called.
	ErrStopped = errors.New("rangeleader: stopped")
)

// Term is one continuous leadership of one range.
type Term struct {
	// Range is the range's number, in [0, Config.Ranges).
	Range int
	// Epoch is the czxid of the range's lock node. A lock is created only
	// once the previous one is gone, and zxids grow across the whole
	// ensemble, so a later leader of a range always has a larger epoch.
	Epoch int64
	// Lock is the lock node's path, for logs.
	Lock string
}

// Config configures a Coordinator. Zero fields take the defaults noted.
type Config struct {
	// Servers are ZooKeeper host:port addresses.
	Servers []string
	// Path is the group's znode; members register under Path/members and
	// range locks live under Path/ranges. Created if missing.
	Path string
	// NodeID names this member (member and lock node data, logs).
	NodeID string
	// Ranges is how many ranges the group splits the work into. Every
	// member of a group must use the same number.
	Ranges int
	// SessionTimeout requested from ZooKeeper; default 4s. A dead member's
	// ranges move about this long after it dies without closing its session.
	SessionTimeout time.Duration
	// SafetyMargin is subtracted from the session timeout to get the trust
	// window; default a quarter of the session timeout.
	SafetyMargin time.Duration
	// HeartbeatInterval between reconciliations (each one confirms the
	// session); default a quarter of the session timeout.
	HeartbeatInterval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Clock for heartbeats and the trust window; default clock.Real.
	Clock clock.Clock
	// Dialer replaces net.DialTimeout for ZooKeeper connections (TLS, or a
	// test's that cuts the network).
	Dialer zk.Dialer
	// Credentials are added to the session before its first request; the
	// client itself sends them again on every reconnection, a new
	// session's included (go-zookeeper v1.0.4 conn.go: loop calls
	// resendZkAuth after each authenticate). A digest credential is also
	// the identity every node the coordinator creates admits (NodeACL: the
	// path and the parents it creates, members/, ranges/, member nodes and
	// range locks), so only members with it can join, lock or release, and
	// the world may only read; Check tightens a world-writable tree to it.
	Credentials []Credential
	// Work runs while this member leads a range, in a goroutine the
	// coordinator owns; it must return soon after ctx ends. The range's
	// lock is given up only once Work has returned.
	Work func(ctx context.Context, t Term)
	// OnChange, if set, is told how many ranges this member leads after
	// each change. It must not block.
	OnChange func(led int)
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
	if c.Ranges < 1 || c.Ranges > 4096 {
		errs = append(errs, fmt.Errorf("ranges: must be in [1, 4096], got %d", c.Ranges))
	}
	if c.Work == nil {
		errs = append(errs, errors.New("work: must be set"))
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
		errs = append(errs, fmt.Errorf("heartbeat interval: must be in (0, %s), got %s", window, c.HeartbeatInterval))
	}
	return errors.Join(errs...)
}

// LockName is the znode name of range r's lock under Path/ranges.
func LockName(r int) string { return fmt.Sprintf("r%04d", r) }

func parseLock(name string) (int, bool) {
	if !strings.HasPrefix(name, "r") {
		return 0, false
	}
	r, err := strconv.Atoi(name[1:])
	return r, err == nil
}

const memberPrefix = "m_"

// memberSeq is the sequence suffix of a member node's name (the GUID the
// protected create puts in front makes names sort randomly).
func memberSeq(name string) (int64, bool) {
	const digits = 10
	if len(name) < len(memberPrefix)+digits || !strings.HasSuffix(name[:len(name)-digits], memberPrefix) {
		return 0, false
	}
	seq, err := strconv.ParseInt(name[len(name)-digits:], 10, 64)
	return seq, err == nil
}

// sortMembers keeps member nodes, in join order.
func sortMembers(children []string) []string {
	type m struct {
		name string
		seq  int64
	}
	ms := make([]m, 0, len(children))
	for _, c := range children {
		if seq, ok := memberSeq(c); ok {
			ms = append(ms, m{c, seq})
		}
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].seq < ms[j].seq })
	out := make([]string, len(ms))
	for i, x := range ms {
		out[i] = x.name
	}
	return out
}

type held struct {
	path  string
	epoch int64
}

type running struct {
	term   Term
	cancel context.CancelCauseFunc
	ctx    context.Context
	done   chan struct{}
}

type event int

const (
	evSession event = iota
	evDisconnected
	evExpired
)

// Coordinator is one member of a range group: it registers in ZooKeeper,
// takes the ranges the assignment gives it, runs Config.Work for each while
// it can prove its session alive, and gives up ranges the assignment moves
// elsewhere. It implements lifecycle.Service.
type Coordinator struct {
	cfg    Config
	log    *slog.Logger
	zlog   *zkLogger // also learns the negotiated session timeout
	acl    []zk.ACL  // of every node it creates (NodeACL)
	clk    clock.Clock
	runner lifecycle.Runner

	conn   *zk.Conn
	events <-chan zk.Event

	// Owned by the loop goroutine.
	member        string // base name of our member node; "" when none
	memberSession int64
	locks         map[int]held
	pathsReady    bool
	authAdded     bool
	orphanSession int64 // a join failed ambiguously in this session

	mismatch atomic.Bool // the group has another number of ranges

	// Shared with the client's callback and the guard.
	mu           sync.Mutex
	queue        []event
	wake         chan struct{}
	guardWake    chan struct{}
	sessionUp    bool
	trustedUntil time.Time
	work         map[int]*running
}

// New validates cfg and returns a coordinator; Start connects.
func New(cfg Config) (*Coordinator, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rangeleader: invalid config: %w", err)
	}
	log := cfg.Logger.With("group", cfg.Path, "node_id", cfg.NodeID)
	return &Coordinator{
		cfg:       cfg,
		log:       log,
		zlog:      &zkLogger{logger: log},
		acl:       NodeACL(cfg.Credentials),
		clk:       cfg.Clock,
		locks:     map[int]held{},
		wake:      make(chan struct{}, 1),
		guardWake: make(chan struct{}, 1),
		work:      map[int]*running{},
	}, nil
}

// Start connects and begins to take part in the group in the background.
func (c *Coordinator) Start(ctx context.Context) error {
	if c.conn != nil {
		return lifecycle.ErrAlreadyStarted
	}
	dialer := c.cfg.Dialer
	if dialer == nil {
		dialer = net.DialTimeout
	}
	conn, events, err := zk.Connect(c.cfg.Servers, c.cfg.SessionTimeout,
		zk.WithEventCallback(c.onEvent), zk.WithLogger(c.zlog), zk.WithDialer(dialer))
	if err != nil {
		return fmt.Errorf("rangeleader: connect %v: %w", c.cfg.Servers, err)
	}
	c.conn, c.events = conn, events
	if err := c.runner.Run(c.run); err != nil {
		c.closeConn()
		return err
	}
	return nil
}

// Stop ends every range's work, waits for it, and closes the session (the
// server deletes our member and lock nodes at once, so the others take the
// ranges over without waiting for a timeout).
func (c *Coordinator) Stop() { c.runner.Stop() }

// Check reports whether the coordinator holds a ZooKeeper session and can
// take part in the group (its number of ranges is the group's).
func (c *Coordinator) Check(context.Context) error {
	if c.conn == nil {
		return errors.New("zookeeper: not started")
	}
	if s := c.conn.State(); s != zk.StateHasSession {
		return fmt.Errorf("zookeeper: %s", s)
	}
	if c.mismatch.Load() {
		return ErrRangesMismatch
	}
	return nil
}

// Led is the ranges whose work is running now, ascending.
func (c *Coordinator) Led() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for r, w := range c.work {
		if w.ctx.Err() == nil {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// SessionTimeout is the timeout the trust window is computed from: the
// configured one, or the smaller one the server negotiated.
func (c *Coordinator) SessionTimeout() time.Duration {
	return effectiveTimeout(c.cfg.SessionTimeout, time.Duration(c.zlog.negotiated.Load()))
}

// onEvent runs on the client's goroutine and must not block: it records the
// event and, when the session is in doubt, ends every range's work at once
// rather than waiting for the loop (which may be blocked in a call).
func (c *Coordinator) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ev.State {
	case zk.StateHasSession:
		c.sessionUp = true
		c.pushLocked(evSession)
	case zk.StateDisconnected:
		c.sessionUp = false
		c.cancelAllLocked(ErrConnectionLost)
		c.pushLocked(evDisconnected)
	case zk.StateExpired:
		c.sessionUp = false
		c.cancelAllLocked(ErrSessionExpired)
		c.pushLocked(evExpired)
	}
}

func (c *Coordinator) pushLocked(ev event) {
	c.queue = append(c.queue, ev)
	signal(c.wake)
}

func (c *Coordinator) cancelAllLocked(cause error) {
	n := 0
	for _, w := range c.work {
		if w.ctx.Err() == nil {
			n++
		}
		w.cancel(cause)
	}
	if n > 0 {
		c.log.Warn("range leadership ended", "ranges", n, "cause", cause)
		c.reportLocked()
	}
}

func (c *Coordinator) reportLocked() {
	if c.cfg.OnChange == nil {
		return
	}
	n := 0
	for _, w := range c.work {
		if w.ctx.Err() == nil {
			n++
		}
	}
	c.cfg.OnChange(n)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (c *Coordinator) run(ctx context.Context) error {
	guardCtx, stopGuard := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.guard(guardCtx) })
	defer func() {
		c.stopAll(ErrStopped)
		stopGuard()
		wg.Wait()
		c.closeConn()
	}()
	hb := c.clk.NewTimer(0)
	defer hb.Stop()
	var membersW, locksW <-chan zk.Event
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
			c.drain()
		case <-membersW:
			membersW = nil
		case <-locksW:
			locksW = nil
		case <-hb.C():
			hb.Reset(c.cfg.HeartbeatInterval)
		}
		if ctx.Err() != nil {
			return nil
		}
		mw, lw, err := c.reconcile(membersW == nil, locksW == nil)
		if mw != nil {
			membersW = mw
		}
		if lw != nil {
			locksW = lw
		}
		if err != nil {
			c.log.Debug("range reconciliation failed; retrying", "err", err)
		}
	}
}

func (c *Coordinator) drain() {
	c.mu.Lock()
	q := c.queue
	c.queue = nil
	c.mu.Unlock()
	for _, ev := range q {
		if ev == evExpired {
			// The server deleted our member and lock nodes; work was
			// cancelled by the callback. Start over in the new session.
			c.waitStopped()
			c.member, c.memberSession = "", 0
			clear(c.locks)
		}
	}
}

// reconcile brings this member's ranges in line with the assignment of the
// group as ZooKeeper shows it now. It sets a watch on the members or the
// locks only when asked (the caller has none pending: a watch is only
// dropped once it fires, so one per path is enough) and returns it.
func (c *Coordinator) reconcile(watchMembers, watchLocks bool) (membersW, locksW <-chan zk.Event, err error) {
	if c.conn.State() != zk.StateHasSession {
		return nil, nil, errors.New("no session")
	}
	if err := c.prepare(); err != nil {
		return nil, nil, err
	}
	if err := c.agreeOnRanges(); err != nil {
		c.stopAll(ErrRangesMismatch)
		for r, h := range c.locks {
			if err := c.conn.Delete(h.path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return nil, nil, err
			}
			delete(c.locks, r)
		}
		return nil, nil, err
	}
	sid := c.conn.SessionID()
	if c.member == "" || c.memberSession != sid {
		if err := c.join(sid); err != nil {
			return nil, nil, err
		}
	}
	sent := c.clk.Now()
	children, membersW, err := c.children(c.cfg.Path+"/members", watchMembers)
	if err != nil {
		return nil, nil, err
	}
	members := sortMembers(children)
	if !slices.Contains(members, c.member) || c.conn.SessionID() != sid {
		// Our node went with an expired session: join again.
		c.member, c.memberSession = "", 0
		c.stopAll(ErrSessionExpired)
		clear(c.locks)
		signal(c.wake)
		return membersW, nil, errors.New("member node lost")
	}
	c.confirm(sent)

	lockNames, locksW, err := c.children(c.cfg.Path+"/ranges", watchLocks)
	if err != nil {
		return membersW, nil, err
	}
	owners := map[int]string{}
	stats := map[int]*zk.Stat{}
	for _, name := range lockNames {
		r, ok := parseLock(name)
		if !ok || r >= c.cfg.Ranges {
			continue
		}
		data, st, err := c.conn.Get(c.cfg.Path + "/ranges/" + name)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return membersW, locksW, err
		}
		owners[r], stats[r] = string(data), st
		if st.EphemeralOwner == sid && owners[r] != c.member {
			// Ours, under the name of a member node this session had
			// before (it was deleted and we joined again). Nobody else
			// can take the lock while the session lives, so take it up
			// again under our name, which every member's Assign reads.
			p := c.cfg.Path + "/ranges/" + name
			st, err := c.conn.Set(p, []byte(c.member), st.Version)
			if err != nil {
				return membersW, locksW, fmt.Errorf("take up range %d under %s: %w", r, c.member, err)
			}
			owners[r], stats[r] = c.member, st
		}
		if _, ok := c.locks[r]; !ok && owners[r] == c.member && st.EphemeralOwner == sid {
			// Ours, from a create whose reply was lost.
			c.locks[r] = held{path: c.cfg.Path + "/ranges/" + name, epoch: st.Czxid}
		}
	}
	// Locks we think we hold but ZooKeeper says otherwise.
	for r := range c.locks {
		if st, ok := stats[r]; !ok || st.EphemeralOwner != sid {
			c.stopRange(r, ErrLockLost)
			delete(c.locks, r)
		}
	}
	target := Assign(c.cfg.Ranges, members, owners)
	for r, h := range c.locks {
		if target[r] == c.member {
			continue
		}
		c.stopRange(r, ErrRebalanced)
		if err := c.conn.Delete(h.path, stats[r].Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return membersW, locksW, fmt.Errorf("release range %d: %w", r, err)
		}
		delete(c.locks, r)
		c.log.Info("range released", "range", r, "epoch", h.epoch)
	}
	for r := 0; r < c.cfg.Ranges; r++ {
		if target[r] != c.member {
			continue
		}
		if _, ok := owners[r]; !ok {
			if err := c.acquire(r, sid); err != nil {
				return membersW, locksW, err
			}
		}
	}
	for r, h := range c.locks {
		c.startRange(r, h)
	}
	return membersW, locksW, nil
}

func (c *Coordinator) children(p string, watch bool) ([]string, <-chan zk.Event, error) {
	if !watch {
		ch, _, err := c.conn.Children(p)
		return ch, nil, err
	}
	ch, _, w, err := c.conn.ChildrenW(p)
	return ch, w, err
}

func (c *Coordinator) prepare() error {
	if !c.authAdded {
		for _, cr := range c.cfg.Credentials {
			if err := c.conn.AddAuth(cr.Scheme, cr.Payload); err != nil {
				return fmt.Errorf("add %s credentials: %w", cr.Scheme, err)
			}
		}
		c.authAdded = true
	}
	if c.pathsReady {
		return nil
	}
	p := ""
	for _, part := range strings.Split(strings.TrimPrefix(c.cfg.Path, "/"), "/") {
		p += "/" + part
		if err := c.ensure(p); err != nil {
			return err
		}
	}
	if err := c.ensure(c.cfg.Path + "/members"); err != nil {
		return err
	}
	c.pathsReady = true
	return nil
}

// ErrRangesMismatch: the group was set up with another number of ranges.
// Lock r0003 would name other partitions for this member than for the
// others, and their epochs would fence different rows, so this member
// stays out of the group until its configuration matches.
var ErrRangesMismatch = errors.New("rangeleader: the group uses another number of ranges")

// agreeOnRanges creates Path/ranges holding the number of ranges, or checks
// that the existing one holds ours. A group whose number differs is taken
// over only while no range is locked (every member of the old setting has
// stopped, as after a deployment restarted with a new --ranges); until
// then this member leads nothing. It runs on every reconciliation, so a
// member left with the old setting stops leading once the group changes.
func (c *Coordinator) agreeOnRanges() error {
	p, want := c.cfg.Path+"/ranges", strconv.Itoa(c.cfg.Ranges)
	_, err := c.conn.Create(p, []byte(want), 0, c.acl)
	if err == nil {
		c.mismatch.Store(false)
		return nil
	}
	if !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("create %s: %w", p, err)
	}
	data, st, err := c.conn.Get(p)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	got := string(data)
	if got == want {
		c.mismatch.Store(false)
		return nil
	}
	if st.NumChildren == 0 {
		if _, err := c.conn.Set(p, []byte(want), st.Version); err != nil {
			return fmt.Errorf("set %s: %w", p, err)
		}
		c.log.Warn("range group had another number of ranges and no leader; now ours", "group_ranges", got, "ranges", want)
		c.mismatch.Store(false)
		return nil
	}
	if !c.mismatch.Swap(true) {
		c.log.Error("range group uses another number of ranges; leading nothing until its members are gone", "group_ranges", got, "ranges", want)
	}
	return fmt.Errorf("%w: %s has %q, this member %q", ErrRangesMismatch, p, got, want)
}

func (c *Coordinator) ensure(p string) error {
	if _, err := c.conn.Create(p, nil, 0, c.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("create %s: %w", p, err)
	}
	return nil
}

// join registers this process as a member. The protected create lets the
// client find its node if the reply was lost; if it still fails without
// knowing, a node of ours may exist unknown to us, and would count as a
// member that Assign gives ranges nobody could ever lock while this session
// lives. So the next join in the same session first deletes every member
// node the session owns.
func (c *Coordinator) join(sid int64) error {
	if c.orphanSession == sid {
		if err := c.removeOrphans(sid); err != nil {
			return err
		}
	}
	c.orphanSession = 0
	path, err := c.conn.CreateProtectedEphemeralSequential(c.cfg.Path+"/members/"+memberPrefix, []byte(c.cfg.NodeID), c.acl)
	if err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			c.pathsReady = false
		} else {
			c.orphanSession = sid
		}
		return fmt.Errorf("join: %w", err)
	}
	c.member, c.memberSession = path[strings.LastIndexByte(path, '/')+1:], sid
	c.log.Info("joined range group", "member", c.member)
	return nil
}

func (c *Coordinator) removeOrphans(sid int64) error {
	children, _, err := c.conn.Children(c.cfg.Path + "/members")
	if err != nil {
		return err
	}
	for _, m := range sortMembers(children) {
		p := c.cfg.Path + "/members/" + m
		ok, st, err := c.conn.Exists(p)
		if err != nil {
			return err
		}
		if ok && st.EphemeralOwner == sid {
			c.log.Warn("deleting orphaned member node", "orphan", m)
			if err := c.conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
		}
	}
	return nil
}

// acquire creates range r's lock. Losing the race (the node exists) is not
// an error: the lock watch says when it goes.
func (c *Coordinator) acquire(r int, sid int64) error {
	p := c.cfg.Path + "/ranges/" + LockName(r)
	if _, err := c.conn.Create(p, []byte(c.member), zk.FlagEphemeral, c.acl); err != nil {
		if errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return fmt.Errorf("acquire range %d: %w", r, err)
	}
	ok, st, err := c.conn.Exists(p)
	if err != nil {
		// Ours but unread: the next reconciliation finds it (owner = us).
		return fmt.Errorf("acquire range %d: %w", r, err)
	}
	if !ok || st.EphemeralOwner != sid {
		return nil
	}
	c.locks[r] = held{path: p, epoch: st.Czxid}
	c.log.Info("range acquired", "range", r, "epoch", st.Czxid)
	return nil
}

// confirm records that the session was alive when a request sent at sent
// succeeded: the server cannot have expired it before sent+timeout.
func (c *Coordinator) confirm(sent time.Time) {
	c.mu.Lock()
	c.trustedUntil = trustDeadline(sent, c.SessionTimeout(), c.cfg.SafetyMargin)
	c.mu.Unlock()
	signal(c.guardWake)
}

// startRange runs Work for a held range unless it already runs, and only
// while the session is up and trusted.
func (c *Coordinator) startRange(r int, h held) {
	c.mu.Lock()
	w := c.work[r]
	if w != nil && w.ctx.Err() == nil {
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if w != nil {
		<-w.done // a cancelled term's work must end before the next begins
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.work, r)
	if !c.sessionUp || !c.clk.Now().Before(c.trustedUntil) {
		return
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	t := Term{Range: r, Epoch: h.epoch, Lock: h.path}
	nw := &running{term: t, cancel: cancel, ctx: ctx, done: make(chan struct{})}
	c.work[r] = nw
	go func() {
		defer close(nw.done)
		c.cfg.Work(ctx, t)
	}()
	c.log.Info("leading range", "range", r, "epoch", h.epoch)
	c.reportLocked()
}

// stopRange ends range r's work and waits for it.
func (c *Coordinator) stopRange(r int, cause error) {
	c.mu.Lock()
	w := c.work[r]
	delete(c.work, r)
	if w != nil {
		w.cancel(cause)
		c.reportLocked()
	}
	c.mu.Unlock()
	if w != nil {
		<-w.done
	}
}

func (c *Coordinator) stopAll(cause error) {
	c.mu.Lock()
	c.cancelAllLocked(cause)
	c.mu.Unlock()
	c.waitStopped()
}

func (c *Coordinator) waitStopped() {
	c.mu.Lock()
	ws := make([]*running, 0, len(c.work))
	for _, w := range c.work {
		ws = append(ws, w)
	}
	c.mu.Unlock()
	for _, w := range ws {
		<-w.done
	}
}

// guard ends every range's work when the trust deadline passes without a
// newer confirmation. It runs apart from the loop, which may be blocked in
// a ZooKeeper call while the network silently drops packets.
func (c *Coordinator) guard(ctx context.Context) {
	var lapsed time.Time // the deadline already acted on
	for {
		c.mu.Lock()
		until := c.trustedUntil
		c.mu.Unlock()
		var t clock.Timer
		var fire <-chan time.Time
		if !until.IsZero() && !until.Equal(lapsed) {
			t = c.clk.NewTimer(until.Sub(c.clk.Now()))
			fire = t.C()
		}
		select {
		case <-ctx.Done():
		case <-c.guardWake:
		case <-fire:
			c.mu.Lock()
			if !c.clk.Now().Before(c.trustedUntil) {
				lapsed = c.trustedUntil
				c.cancelAllLocked(ErrTrustLapsed)
			}
			c.mu.Unlock()
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// closeConn closes the session and waits (bounded) for the client's
// goroutines, which close the event channel as they exit.
func (c *Coordinator) closeConn() {
	c.conn.Close()
	t := c.clk.NewTimer(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case _, ok := <-c.events:
			if !ok {
				return
			}
		case <-t.C():
			c.log.Warn("zookeeper client did not shut down in time")
			return
		}
	}
}
