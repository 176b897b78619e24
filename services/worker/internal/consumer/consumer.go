// Package consumer reads firings from the four priority topics as a member
// of the workers' consumer group, hands them to the holder, and commits
// offsets only below the lowest firing of each partition that is not yet
// finished.
//
// Records are held for up to the prefetch window (minutes), so the group is
// run with autocommit off and without BlockRebalanceOnPoll (holding records
// with it on would stall every rebalance for minutes). Instead each
// partition is an Owner of its items (see work.Owner) and a rebalance is
// handled in the callbacks:
//
//   - revoked (another member takes the partition, promptly): keep the
//     held firings due within RevokeKeep (the next owner could not fetch
//     and lease them in time) and abandon the rest (the next owner gets
//     them again from the committed offset), wait — bounded — for the ones
//     executing to finish, commit the partition's watermark, and only then
//     return, which lets the rebalance proceed;
//   - lost (the session ended: the broker is down or unreachable, or this
//     member was too slow): keep every held firing and return at once
//     (commits would fail). Nobody may get the partition for as long as
//     the outage lasts, and the firings held here are the ones due in it.
//
// Keeping a firing after its partition moved is safe because the group is
// not what makes a firing fire once: its lease is. A kept firing and the
// next owner's copy of it race for one lease in Redis; the loser finds the
// lease held, waits for it to end and then finds the done marker. So a
// Kafka outage costs the held firings nothing, and a rebalance costs the
// firings about to fire nothing. A partition given back to this worker
// while it still has kept firings is attached again, skipping the records
// it already holds; a detached partition is forgotten once its firings are
// over. Its offsets are committed by whoever owns it.
//
// A fetch that was returned before a revoke may still be in the poll loop
// when the revoke runs; records are added under the partition's lock and
// only while the partition is still assigned, so they are dropped.
//
// With a tracer, each arriving firing gets a worker.consume span, the child
// of the context on its record's traceparent header (the relay's publish
// span) or else in its envelope, and a worker.hold span under it while it
// waits; the partition ends them when the firing is finished or abandoned.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/kafkaconn"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/offsets"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Holder is where arriving firings go, and where a revoke takes back the
// ones that have not started.
type Holder interface {
	// AddAfter holds it, not to be released before notBefore (0: from
	// its instant on).
	AddAfter(it *work.Item, notBefore int64)
	Remove(it *work.Item) bool
}

// Config tunes the consumer.
type Config struct {
	Brokers []string
	// Topics are the four priority topics.
	Topics []string
	Group  string
	// ClientID names the member in broker logs (the worker id).
	ClientID string
	// SessionTimeout: how long the broker waits for a silent member before
	// moving its partitions. Kafka's 45 s default would leave a dead
	// worker's firings unfired for 45 s; a few seconds is enough on a LAN.
	SessionTimeout time.Duration
	// HeartbeatInterval must be well below SessionTimeout (default a sixth).
	HeartbeatInterval time.Duration
	// RebalanceTimeout bounds a revoke's drain for the whole group; it must
	// exceed DrainTimeout.
	RebalanceTimeout time.Duration
	// DrainTimeout bounds how long a revoke waits for executing firings.
	DrainTimeout time.Duration
	// RevokeKeep: a revoke keeps the held firings due within this long
	// (the next owner would fetch and lease them late) and abandons the
	// rest to the next owner. A lost session keeps them all.
	RevokeKeep time.Duration
	// Clock is the corrected clock firings are due by (RevokeKeep,
	// CatchUpRate).
	Clock clock.Clock
	// CatchUpRate paces catch-up firings (per second) that arrive
	// after their instants; see pacer. 0: not paced.
	CatchUpRate float64
	// CommitInterval between periodic commits.
	CommitInterval time.Duration
	// WaitRetry spaces the probes of brokers that did not answer at
	// Start; 2 s when zero.
	WaitRetry time.Duration
	// MaxHeld bounds memory whatever the backlog: while this many firings
	// are held, only the partitions whose fetched firings are due soonest
	// go on fetching (within a second of the earliest), so no partition
	// falls behind the others.
	MaxHeld int
	// FetchAhead pauses a partition whose fetched firings reach this far
	// past now (0: no limit): a worker need not hold the whole staging
	// window, and each partition stops at the same horizon, so one that
	// fetches faster cannot fill the worker while another starves. The
	// price: a firing appended behind firings due later (staged late: a
	// new job's first slot, a trigger, a retry) is not fetched until the
	// horizon passes those. The worker's default is 0; MaxHeld bounds
	// memory.
	FetchAhead time.Duration
	// Unpaused are topics fetched even while MaxHeld pauses the others:
	// the CRITICAL topic, so an overloaded worker still takes in the
	// firings that must not wait behind the backlog (few by nature).
	Unpaused []string
	// HeldShares make the back-pressure per topic: the firings held from
	// a listed topic, counted with those of every topic listed after it,
	// are bounded by Percent of MaxHeld (not by MaxHeld and everything
	// held). List the topics from the most urgent: with MEDIUM at 80 and
	// LOW at 50, a LOW backlog pauses LOW alone once it holds half of
	// MaxHeld, MEDIUM and LOW stop together at 80 %, and the rest is left
	// to the topics not listed (HIGH), which with them are bounded by
	// MaxHeld as before. Without it every topic but the Unpaused ones
	// shares MaxHeld.
	HeldShares []TopicShare
	// Poison, when set, receives each undecodable record (a private copy)
	// and why it could not be decoded, and must call done once the record
	// is safely elsewhere (the DLQ topic); only then may the offset be
	// committed past it. It must not block. Without it the record is
	// skipped.
	Poison func(rec *kgo.Record, cause error, done func())
	// Opts are extra client options: TLS and SASL (pkg/store/kafkaconn), and
	// tests' own.
	Opts []kgo.Opt
	// Tracer traces each firing's stay in the worker (see work.Trace);
	// nil: tracing off.
	Tracer trace.Tracer
	// Unstarted gives back the leases of firings given back to their
	// partition before their request was sent; nil: they end with their
	// TTL and count as deliveries.
	Unstarted *Unstarted
	// Arrived, when set, is told of every firing that arrives and is held
	// (misfire.Judge.Arrived: a late firing's job is judged by the newest
	// of its firings the worker holds).
	Arrived func(f *sundialv1.Firing)
	// Changed, when set, reports the version a firing's job changed to
	// since it was staged (versions.Watch.Newer); such a firing is not
	// held but claimed and handed to Drop (discard.Summarizer.Drop), which
	// finishes it once its summary is recorded.
	Changed func(jobID string, version int64) (int64, bool)
	Drop    func(it *work.Item, current int64)
	// InstanceID makes this worker a static member of the group
	// (kgo.InstanceID): a worker restarted with the same id within the
	// session timeout gets its partitions back at once, without a
	// rebalance. It must be stable across restarts of one worker and
	// unique among the workers. Empty: a dynamic member.
	InstanceID string
}

// TopicShare is one topic's part of MaxHeld (Config.HeldShares).
type TopicShare struct {
	Topic   string
	Percent int
}

// Defaults fills zero fields.
func (c *Config) Defaults() {
	if c.Group == "" {
		c.Group = "sundial-workers"
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 6 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		// Heartbeats are how a surviving member learns of a rebalance, so
		// more frequent ones shorten a takeover; they cost one tiny request.
		c.HeartbeatInterval = c.SessionTimeout / 6
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.RebalanceTimeout <= 0 {
		c.RebalanceTimeout = c.DrainTimeout + 30*time.Second
	}
	if c.CommitInterval <= 0 {
		c.CommitInterval = time.Second
	}
	if c.RevokeKeep <= 0 {
		c.RevokeKeep = 10 * time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.WaitRetry <= 0 {
		c.WaitRetry = 2 * time.Second
	}
	if c.MaxHeld <= 0 {
		c.MaxHeld = 1_000_000
	}
}

type tp struct {
	topic     string
	partition int32
}

// Consumer is a lifecycle.Service.
type Consumer struct {
	cfg    Config
	holder Holder
	m      *metrics.Metrics
	logger *slog.Logger

	// cl is the group's client: nil until the brokers have answered (at
	// Start, or later when they were down then). Published atomically
	// because the readiness check and Stop read it from other goroutines.
	cl atomic.Pointer[kgo.Client]
	// waitErr is why the brokers have not answered yet, for Ping.
	waitErr atomic.Pointer[error]

	mu    sync.Mutex
	parts map[tp]*partition
	// kept are the detached partitions whose kept firings are not over;
	// one given back to this worker is attached again.
	kept map[tp]*partition
	// closing: Stop is leaving the group; nothing is kept (the holders
	// stop next, and the next owner fires everything from the commit).
	closing atomic.Bool

	// commitMu serializes the periodic commit with a revoke's commit, so
	// a periodic commit of a revoked partition never lands after it.
	commitMu sync.Mutex
	// noDoneMeta: the brokers refused the finished records' metadata as
	// too large once; commits carry offsets alone from then on.
	noDoneMeta atomic.Bool

	pace *pacer

	// held counts, per topic, the firings fetched and neither finished nor
	// abandoned (held, ready or executing): what each topic occupies of
	// MaxHeld. The partitions keep them.
	held map[string]*atomic.Int64
	// tiers are the back-pressure groups, most urgent first (see
	// Config.HeldShares); tierOf maps a pausable topic to its tier.
	tiers  []tier
	tierOf map[string]int

	poll   lifecycle.Runner
	commit lifecycle.Runner
	once   sync.Once
}

// tier is a group of topics paused together when the firings held from
// them and from every less urgent tier reach limit.
type tier struct {
	topics []string
	limit  int
}

// New returns a consumer feeding h.
func New(cfg Config, h Holder, m *metrics.Metrics, logger *slog.Logger) *Consumer {
	cfg.Defaults()
	c := &Consumer{cfg: cfg, holder: h, m: m, logger: logger, parts: map[tp]*partition{}, kept: map[tp]*partition{}, pace: newPacer(cfg.CatchUpRate),
		held: map[string]*atomic.Int64{}, tierOf: map[string]int{}}
	for _, t := range cfg.Topics {
		c.held[t] = &atomic.Int64{}
	}
	// The first tier is every pausable topic not given a share, bounded
	// with all the rest by MaxHeld.
	first := tier{limit: cfg.MaxHeld}
	for _, t := range cfg.Topics {
		if !slices.Contains(cfg.Unpaused, t) && !slices.ContainsFunc(cfg.HeldShares, func(s TopicShare) bool { return s.Topic == t }) {
			first.topics = append(first.topics, t)
		}
	}
	c.tiers = append(c.tiers, first)
	for _, s := range cfg.HeldShares {
		if slices.Contains(cfg.Unpaused, s.Topic) || !slices.Contains(cfg.Topics, s.Topic) {
			continue
		}
		c.tiers = append(c.tiers, tier{topics: []string{s.Topic}, limit: max(1, cfg.MaxHeld*s.Percent/100)})
	}
	for i, tr := range c.tiers {
		for _, t := range tr.topics {
			c.tierOf[t] = i
		}
	}
	return c
}

// heldOf is the counter of topic's firings in memory.
func (c *Consumer) heldOf(topic string) *atomic.Int64 {
	if n := c.held[topic]; n != nil {
		return n
	}
	return &atomic.Int64{} // not a configured topic: counted nowhere
}

// Start joins the group and starts polling and committing. Brokers that
// refuse the worker's settings (a wrong SASL password, an untrusted
// certificate) stop it here, naming Kafka. Brokers that do not answer do
// not: Start returns at once, the worker runs on (firing what it holds,
// nothing yet at a first start), Ping says the brokers are awaited, and the
// poll goroutine probes them every WaitRetry and joins the group as soon
// as they answer.
func (c *Consumer) Start(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, connsec.StartupTimeout)
	st, err := c.probe(pctx)
	cancel()
	switch {
	case err == nil:
		if err := c.connect(st); err != nil {
			return err
		}
		if err := c.poll.Run(c.pollLoop); err != nil {
			c.cl.Load().Close()
			return err
		}
		return c.commit.Run(c.commitLoop)
	case errors.Is(err, connsec.ErrRefused):
		return fmt.Errorf("consumer: %w", err)
	}
	c.waitErr.Store(&err)
	c.logger.Warn("kafka not reachable; started without joining the group, waiting for the brokers", "brokers", c.cfg.Brokers, "err", err, "retry_every", c.cfg.WaitRetry)
	return c.poll.Run(c.awaitThenPoll)
}

// awaitThenPoll is the poll goroutine of a consumer started while the
// brokers were down: it probes them until they answer, joins, starts the
// commit loop and polls. A refusal met meanwhile is logged and waited
// out like silence: the worker is up already, and /readyz names Kafka.
func (c *Consumer) awaitThenPoll(ctx context.Context) error {
	for {
		t := c.cfg.Clock.NewTimer(c.cfg.WaitRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		pctx, cancel := context.WithTimeout(ctx, connsec.StartupTimeout)
		st, err := c.probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			c.logger.Info("kafka answers: joining the group", "brokers", c.cfg.Brokers, "session_timeout", st)
			if err := c.connect(st); err != nil {
				return err
			}
			c.waitErr.Store(nil)
			if err := c.commit.Run(c.commitLoop); err != nil {
				return err
			}
			return c.pollLoop(ctx)
		}
		if errors.Is(err, connsec.ErrRefused) {
			c.logger.Error("kafka refuses the worker's settings; waiting for them to be mended", "err", err)
		}
		c.waitErr.Store(&err)
	}
}

// probe checks that the brokers answer (kafkaconn.Check: a refusal is
// marked connsec.ErrRefused) and returns the session timeout to join with.
func (c *Consumer) probe(ctx context.Context) (time.Duration, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.cfg.Brokers...), kgo.ClientID(c.cfg.ClientID)}, c.cfg.Opts...)...)
	if err != nil {
		return 0, fmt.Errorf("consumer: client: %w", err)
	}
	defer cl.Close()
	if err := kafkaconn.Check(ctx, cl, c.cfg.Brokers); err != nil {
		return 0, err
	}
	return c.sessionTimeout(ctx, cl), nil
}

// connect makes the group's client; the group is joined by its first poll.
func (c *Consumer) connect(sessionTimeout time.Duration) error {
	c.cfg.SessionTimeout = sessionTimeout
	c.cfg.HeartbeatInterval = min(c.cfg.HeartbeatInterval, c.cfg.SessionTimeout/3)
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.cfg.Brokers...),
		kgo.ClientID(c.cfg.ClientID),
		kgo.ConsumerGroup(c.cfg.Group),
		kgo.ConsumeTopics(c.cfg.Topics...),
		// Offsets are committed by the watermark, never by the client.
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		// The commit's metadata says which records past the committed
		// offset were finished (offsets.Done): read before the new
		// partitions are fetched, so they are passed without a lease call.
		kgo.OnOffsetsFetched(c.fetched),
		kgo.SessionTimeout(c.cfg.SessionTimeout),
		kgo.HeartbeatInterval(c.cfg.HeartbeatInterval),
		kgo.RebalanceTimeout(c.cfg.RebalanceTimeout),
		// Cooperative rebalancing revokes only the partitions that move,
		// so a worker joining does not make every other worker drain.
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		// A new group starts from the beginning: firings published before
		// the first worker joined must still fire.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Envelopes are small; a smaller fetch ceiling bounds the memory
		// of buffered fetches next to the held firings.
		kgo.FetchMaxBytes(16 << 20),
		// Retries, the group's rejoin among them, back off to a quarter
		// of the session timeout at most (the client's default grows to
		// 5 s). After a broker outage every worker rejoins within that of
		// the broker's return, so the group is rebuilt with all of them
		// at once; with 5 s, the first back was given every partition
		// (the others' sessions had expired), fetched their whole window,
		// and abandoned half of it a rebalance later — firings due in
		// those seconds came up to 3 s late (docs/reliability.md).
		kgo.RetryBackoffFn(retryBackoff(c.cfg.SessionTimeout / 4)),
		// Partitions assigned in a rebalance are fetched from with the
		// next fetch request, once the one in flight returns: at the
		// default 5 s long poll, a quiet worker given a dead worker's
		// partitions fetched them 5 s late. Half a second bounds that for
		// two small requests a second per broker.
		kgo.FetchMaxWait(500 * time.Millisecond),
	}
	if c.cfg.InstanceID != "" {
		// Static membership: a worker killed and restarted within the
		// session timeout rejoins as itself and is given its partitions
		// back with no rebalance; a dynamic member would join as a new
		// member with an empty assignment while the group waits out the
		// dead one's session.
		opts = append(opts, kgo.InstanceID(c.cfg.InstanceID))
	}
	opts = append(opts, c.cfg.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("consumer: client: %w", err)
	}
	c.cl.Store(cl)
	return nil
}

// sessionTimeout is the configured session timeout, raised to the
// brokers' group.min.session.timeout.ms when that is higher: a broker
// refuses to let a member join with a shorter one, and a worker that
// cannot join fires nothing. Kafka's own floor is 6 s; deploy/local/kafka
// lowers it to 1 s. If the brokers' setting cannot be read (no
// DescribeConfigs permission), the configured value is used as it is.
func (c *Consumer) sessionTimeout(ctx context.Context, cl *kgo.Client) time.Duration {
	want := c.cfg.SessionTimeout
	adm := kadm.NewClient(cl)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	meta, err := adm.BrokerMetadata(cctx)
	if err != nil {
		c.logger.Warn("could not read the brokers' minimum session timeout; using --session-timeout as it is", "err", err)
		return want
	}
	rcs, err := adm.DescribeBrokerConfigs(cctx, meta.Brokers.NodeIDs()...)
	if err != nil {
		c.logger.Warn("could not read the brokers' minimum session timeout; using --session-timeout as it is", "err", err)
		return want
	}
	floor := time.Duration(0)
	for _, rc := range rcs {
		for _, cfg := range rc.Configs {
			if cfg.Key != "group.min.session.timeout.ms" || cfg.Value == nil {
				continue
			}
			if ms, err := strconv.ParseInt(*cfg.Value, 10, 64); err == nil {
				floor = max(floor, time.Duration(ms)*time.Millisecond)
			}
		}
	}
	if floor > want {
		c.logger.Warn("the brokers refuse sessions as short as --session-timeout; using their minimum (lower group.min.session.timeout.ms on the brokers for faster failover)",
			"session_timeout", want, "broker_min", floor)
		return floor
	}
	return want
}

// Stop stops polling, then leaves the group: leaving revokes every
// partition, so the revoke callback drains executing firings and commits
// before the client closes. A static member's client does not send the
// leave when it closes (the group would keep its partitions for it until
// the session timeout), so a graceful stop sends it itself: the other
// workers take the partitions at once, and a restart joins afresh.
func (c *Consumer) Stop() {
	c.once.Do(func() {
		c.closing.Store(true)
		c.poll.Stop()
		c.commit.Stop()
		if cl := c.cl.Load(); cl != nil {
			cl.Close()
			if c.cfg.InstanceID != "" {
				c.leaveStatic()
			}
		}
	})
}

// leaveStatic removes this static member from the group by its instance
// id (a LeaveGroup with no member id, as an admin removal does).
func (c *Consumer) leaveStatic() {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.cfg.Brokers...), kgo.ClientID(c.cfg.ClientID)}, c.cfg.Opts...)...)
	if err != nil {
		c.logger.Warn("could not leave the group; its partitions move when the session times out", "err", err, "session_timeout", c.cfg.SessionTimeout)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = c.cfg.Group
	m := kmsg.NewLeaveGroupRequestMember()
	m.InstanceID = kmsg.StringPtr(c.cfg.InstanceID)
	m.Reason = kmsg.StringPtr("worker stopping")
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
		for _, mr := range resp.Members {
			if err == nil {
				err = kerr.ErrorForCode(mr.ErrorCode)
			}
		}
	}
	switch {
	case err == nil:
		c.logger.Info("left the group", "instance_id", c.cfg.InstanceID)
	case errors.Is(err, kerr.UnknownMemberID):
		// Already gone (its session ended first): nothing to leave.
	default:
		c.logger.Warn("could not leave the group; its partitions move when the session times out", "err", err, "session_timeout", c.cfg.SessionTimeout)
	}
}

// Done is closed when the poll loop returned; Err says why, when it was
// not Stop (lifecycle.Watched: a consumer that stopped fetching must not
// leave the worker up, holding its partitions).
func (c *Consumer) Done() <-chan struct{} { return c.poll.Done() }

// Err is why the poll loop returned on its own, if it did.
func (c *Consumer) Err() error { return c.poll.Err() }

var _ lifecycle.Watched = (*Consumer)(nil)

// retryBackoff doubles from 100 ms up to limit (at least 100 ms), with up
// to a fifth of jitter so workers that failed together do not retry in
// lockstep.
func retryBackoff(limit time.Duration) func(tries int) time.Duration {
	limit = max(limit, 100*time.Millisecond)
	return func(tries int) time.Duration {
		d := limit
		if tries < 16 {
			d = min(100*time.Millisecond<<max(tries-1, 0), limit)
		}
		return d - time.Duration(rand.Int64N(int64(d)/5+1))
	}
}

// Ping checks the brokers answer (readiness).
func (c *Consumer) Ping(ctx context.Context) error {
	cl := c.cl.Load()
	if cl == nil {
		if err := c.waitErr.Load(); err != nil {
			return fmt.Errorf("consumer: waiting for kafka %v: %w", c.cfg.Brokers, *err)
		}
		return errors.New("consumer: not started")
	}
	return cl.Ping(ctx)
}

// Assigned lists the partitions currently owned (tests, debugging).
func (c *Consumer) Assigned() map[string][]int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]int32{}
	for k := range c.parts {
		out[k.topic] = append(out[k.topic], k.partition)
	}
	return out
}

// Positions returns, per owned partition, the offset of the next record
// it will fetch, or -1 when it has fetched none yet (the fetch starts at
// the committed offset). The lag exporter counts the overdue records
// beyond it (the due backlog).
func (c *Consumer) Positions() map[string]map[int32]int64 {
	c.mu.Lock()
	parts := make([]*partition, 0, len(c.parts))
	for _, p := range c.parts {
		parts = append(parts, p)
	}
	c.mu.Unlock()
	out := map[string]map[int32]int64{}
	for _, p := range parts {
		next, ok := p.wm.Next()
		if !ok {
			next = -1
		}
		if out[p.topic] == nil {
			out[p.topic] = map[int32]int64{}
		}
		out[p.topic][p.id] = next
	}
	return out
}

func (c *Consumer) pollLoop(ctx context.Context) error {
	paused := false
	pausedParts := map[tp]bool{}
	for {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if paused {
			// Only the unpaused topics can return records: poll them
			// briefly, so the held count is looked at again soon.
			pctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
		}
		fetches := c.cl.Load().PollRecords(pctx, 1000)
		cancel()
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				c.logger.Warn("fetch error", "topic", topic, "partition", partition, "err", err)
			}
		})
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) == 0 {
				return
			}
			c.mu.Lock()
			p := c.parts[tp{fp.Topic, fp.Partition}]
			c.mu.Unlock()
			if p == nil {
				return // revoked since this fetch; the next owner has them
			}
			p.add(fp.Records)
			last := fp.Records[len(fp.Records)-1].Offset
			c.m.Lag.WithLabelValues(fp.Topic, p.label).Set(float64(max(0, fp.HighWatermark-last-1)))
		})
		paused = c.paceFetches(pausedParts)
	}
}

// paceFetches pauses and resumes the fetching of the pausable topics' partitions
// by how far ahead each has fetched (see Config.FetchAhead and MaxHeld),
// and reports whether any is paused. Pausing per partition, not all at
// once, matters: a global pause lets the partitions that happen to fetch
// first fill the worker while the others' firings wait in Kafka past their
// instants.
//
// The memory bound is per tier of topics (Config.HeldShares): a tier is
// over when the firings held from it and from the less urgent tiers reach
// its limit, or when a more urgent tier is over (its count includes this
// one's). So a LOW backlog fills LOW's share and stops there, and the HIGH
// topic fetches on: the back-pressure of one priority is not every
// priority's.
func (c *Consumer) paceFetches(paused map[tp]bool) bool {
	now := c.cfg.Clock.Now().UnixNano()
	n := len(c.tiers)
	own := make([]int64, n)
	for t, i := range c.tierOf {
		own[i] += c.heldOf(t).Load()
	}
	// over[i]: tier i's partitions fetch only near the earliest of the
	// tier; full[i]: past a quarter more, even those stop (one
	// partition, or all due together, would not stop otherwise).
	over, full := make([]bool, n), make([]bool, n)
	below := int64(0)
	for i := n - 1; i >= 0; i-- {
		below += own[i]
		lim := int64(c.tiers[i].limit)
		over[i] = below >= lim
		full[i] = below >= lim+lim/4
	}
	for i := 1; i < n; i++ {
		over[i] = over[i] || over[i-1]
		full[i] = full[i] || full[i-1]
	}
	c.mu.Lock()
	type cand struct {
		k     tp
		tier  int
		ahead int64
	}
	var cs []cand
	earliest := make([]int64, n)
	for i := range earliest {
		earliest[i] = math.MaxInt64
	}
	for k, p := range c.parts {
		i, ok := c.tierOf[k.topic]
		if !ok {
			continue // unpaused
		}
		a := p.ahead.Load()
		cs = append(cs, cand{k, i, a})
		earliest[i] = min(earliest[i], a)
	}
	c.mu.Unlock()
	horizon := int64(math.MaxInt64)
	if c.cfg.FetchAhead > 0 {
		horizon = now + int64(c.cfg.FetchAhead)
	}
	limits := make([]int64, n)
	for i := range limits {
		limits[i] = horizon
		if over[i] {
			limits[i] = min(limits[i], earliest[i]+int64(time.Second))
		}
		if full[i] {
			limits[i] = math.MinInt64
		}
	}
	pause, resume := map[string][]int32{}, map[string][]int32{}
	anyOver := false
	for _, x := range cs {
		limit := limits[x.tier]
		anyOver = anyOver || over[x.tier]
		// Resume a little below the limit, so a partition does not
		// flap at every fetch.
		switch should := x.ahead > limit; {
		case should && !paused[x.k]:
			pause[x.k.topic] = append(pause[x.k.topic], x.k.partition)
			paused[x.k] = true
		case !should && paused[x.k] && (limit == math.MaxInt64 || over[x.tier] || x.ahead < limit-int64(c.cfg.FetchAhead/10)):
			resume[x.k.topic] = append(resume[x.k.topic], x.k.partition)
			delete(paused, x.k)
		}
	}
	c.mu.Lock()
	for k := range paused {
		if c.parts[k] == nil {
			// Revoked meanwhile: a pause outlives the assignment, so
			// lift it for whoever fetches the partition next.
			resume[k.topic] = append(resume[k.topic], k.partition)
			delete(paused, k)
		}
	}
	c.mu.Unlock()
	if len(pause) > 0 {
		if anyOver {
			c.logger.Debug("holding too many firings: only the partitions furthest behind fetch", "max_held", c.cfg.MaxHeld, "paused", pause)
		}
		c.cl.Load().PauseFetchPartitions(pause)
	}
	if len(resume) > 0 {
		c.cl.Load().ResumeFetchPartitions(resume)
	}
	return len(paused) > 0
}

func (c *Consumer) commitLoop(ctx context.Context) error {
	t := time.NewTicker(c.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		c.mu.Lock()
		parts := make([]*partition, 0, len(c.parts))
		for _, p := range c.parts {
			parts = append(parts, p)
		}
		for k, p := range c.kept {
			if p.over() {
				delete(c.kept, k)
			}
		}
		c.mu.Unlock()
		c.commitParts(ctx, parts)
	}
}

// commitParts commits each partition's watermark that moved since its last
// commit.
func (c *Consumer) commitParts(ctx context.Context, parts []*partition) {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	offs := map[string]map[int32]kgo.EpochOffset{}
	byTP := map[tp]*partition{}
	metas := map[tp]string{}
	for _, p := range parts {
		off, epoch, ok := p.wm.Commit()
		c.m.Uncommitted.WithLabelValues(p.topic, p.label).Set(float64(p.wm.Len()))
		if !ok {
			continue
		}
		meta := ""
		if !c.noDoneMeta.Load() {
			meta = offsets.EncodeDone(p.wm.Done(off, offsets.MaxDoneBytes))
		}
		if off < p.committed.Load() || off == p.committed.Load() && meta == p.committedMeta {
			continue
		}
		if offs[p.topic] == nil {
			offs[p.topic] = map[int32]kgo.EpochOffset{}
		}
		offs[p.topic][p.id] = kgo.EpochOffset{Epoch: epoch, Offset: off}
		byTP[tp{p.topic, p.id}] = p
		metas[tp{p.topic, p.id}] = meta
	}
	if len(offs) == 0 {
		return
	}
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			t := &req.Topics[i]
			for j := range t.Partitions {
				if m := metas[tp{t.Topic, t.Partitions[j].Partition}]; m != "" {
					t.Partitions[j].Metadata = &m
				}
			}
		}
		return nil
	})
	c.cl.Load().CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			c.m.Commits.WithLabelValues("error").Inc()
			if !errors.Is(err, context.Canceled) {
				c.logger.Warn("offset commit failed", "err", err)
			}
			return
		}
		for _, t := range resp.Topics {
			for _, pr := range t.Partitions {
				p := byTP[tp{t.Topic, pr.Partition}]
				if p == nil {
					continue
				}
				if pr.ErrorCode == kerr.OffsetMetadataTooLarge.Code && c.noDoneMeta.CompareAndSwap(false, true) {
					// The brokers' offset.metadata.max.bytes is below what
					// the finished records need: commit offsets alone.
					c.logger.Warn("the brokers refuse the finished records' commit metadata as too large; committing offsets alone (a takeover re-reads finished records past the commit)",
						"topic", t.Topic, "partition", pr.Partition, "metadata_bytes", len(metas[tp{t.Topic, pr.Partition}]))
				}
				if pr.ErrorCode != 0 {
					c.m.Commits.WithLabelValues("error").Inc()
					c.logger.Warn("offset commit refused", "topic", t.Topic, "partition", pr.Partition, "code", pr.ErrorCode)
					continue
				}
				c.m.Commits.WithLabelValues("ok").Inc()
				p.committed.Store(offs[t.Topic][pr.Partition].Offset)
				p.committedMeta = metas[tp{t.Topic, pr.Partition}]
			}
		}
	})
}

func (c *Consumer) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, ps := range assigned {
		for _, id := range ps {
			k := tp{topic, id}
			if c.parts[k] != nil {
				continue
			}
			if p := c.kept[k]; p != nil {
				delete(c.kept, k)
				if p.reattach() {
					c.parts[k] = p
					c.logger.Info("partition given back while its firings were kept; resuming it", "topic", topic, "partition", id)
					continue
				}
			}
			c.parts[k] = newPartition(c, topic, id)
		}
	}
	c.m.Assigned.Set(float64(len(c.parts)))
	c.logger.Info("partitions assigned", "assigned", assigned)
}

// fetched reads, for the partitions just assigned, which records past the
// committed offset their previous owner finished (offsets.DecodeDone), so
// add passes them without working them again.
func (c *Consumer) fetched(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	set := func(topic string, id int32, at int64, meta *string) {
		if meta == nil || at < 0 {
			return
		}
		bits, ok := offsets.DecodeDone(*meta)
		if !ok {
			return
		}
		c.mu.Lock()
		p := c.parts[tp{topic, id}]
		c.mu.Unlock()
		if p != nil {
			p.finishedAhead(at, bits)
		}
	}
	for _, t := range resp.Topics {
		for _, pr := range t.Partitions {
			set(t.Topic, pr.Partition, pr.Offset, pr.Metadata)
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, pr := range t.Partitions {
				set(t.Topic, pr.Partition, pr.Offset, pr.Metadata)
			}
		}
	}
	return nil
}

func (c *Consumer) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	parts := c.take(revoked)
	if len(parts) == 0 {
		return
	}
	// Firings due soon are kept: the next owner starts fetching only once
	// this returns, and would lease them late.
	horizon := c.cfg.Clock.Now().Add(c.cfg.RevokeKeep).UnixNano()
	keep := func(it *work.Item) bool { return !c.closing.Load() && it.FireAt <= horizon }
	kept, abandoned := 0, 0
	for _, p := range parts {
		k, a := p.detach(keep)
		kept, abandoned = kept+k, abandoned+a
	}
	c.remember(parts)
	// Wait for the executing ones, bounded: past the bound their offsets
	// stay uncommitted and the next owner drops them as done. The client's
	// context may already be ending when Close revokes; the drain and the
	// final commit have their own bound instead.
	deadline := time.NewTimer(c.cfg.DrainTimeout)
	defer deadline.Stop()
	drained := true
	for _, p := range parts {
		select {
		case <-p.drained:
		case <-deadline.C:
			drained = false
		}
		if !drained {
			break
		}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	c.commitParts(cctx, parts)
	for _, p := range parts {
		p.forgetMetrics()
	}
	c.logger.Info("partitions revoked", "revoked", revoked, "kept_held", kept, "abandoned_held", abandoned, "drained", drained)
}

// lost: the session ended without a revoke (the broker is down or cannot
// be reached, or it expired this member). Every held firing is kept: during
// a Kafka outage nobody else can fetch them, and they fire on time here
// under their leases; if another member has the partition meanwhile, the
// lease lets one copy fire. Offsets are committed by the partition's owner
// once the broker answers again (this worker, if it is given the partition
// back).
func (c *Consumer) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	parts := c.take(lost)
	keep := func(*work.Item) bool { return !c.closing.Load() }
	kept, abandoned := 0, 0
	for _, p := range parts {
		k, a := p.detach(keep)
		kept, abandoned = kept+k, abandoned+a
		p.forgetMetrics()
	}
	c.remember(parts)
	if len(parts) > 0 {
		c.logger.Warn("partitions lost; held firings are kept and fire under their leases", "lost", lost, "kept_held", kept, "abandoned_held", abandoned)
	}
}

// remember keeps detached partitions that may be given back.
func (c *Consumer) remember(parts []*partition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range parts {
		c.kept[tp{p.topic, p.id}] = p
	}
}

// take removes the partitions from the assignment, so the poll loop stops
// adding to them.
func (c *Consumer) take(m map[string][]int32) []*partition {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*partition
	for topic, ps := range m {
		for _, id := range ps {
			k := tp{topic, id}
			if p := c.parts[k]; p != nil {
				out = append(out, p)
				delete(c.parts, k)
			}
		}
	}
	c.m.Assigned.Set(float64(len(c.parts)))
	return out
}
