package console

// The overview's own numbers, without Prometheus: read from the per-minute
// rollup the workers write in groups (firing_minutes and worker_running,
// migration 00026, written by the worker's rollup package; the format is
// pkg/postgres/firingstats's) and from the api's own Postgres (outbox depth, range
// leaders). Every read is bounded: a tenant's hour is at most 60 minutes ×
// 4 priorities rows by its primary key, its day 5,760; the platform's hour
// is every tenant's 240 rows by the minute index; the outbox is counted
// up to outboxCap; leader_epochs holds one row per election.
//
// Consumer lag is Kafka's (the group's committed offsets), and the api
// holds no connection to the firing brokers (its --kafka-brokers is the
// Kafka targets' cluster): the workers read it and write it per priority
// topic to group_lag (migration 00028, the worker's rollup package) every
// ~10 s, four rows in all. With a Prometheus the platform panel also
// charts it over the hour (sundial_worker_group_lag_records).

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/firingstats"
	"github.com/sundialhq/sundial/pkg/postgres/instances"
	"github.com/sundialhq/sundial/pkg/process/admin"
)

// minuteCounts are one minute's rollup, summed over priorities (and
// tenants, for the platform).
type minuteCounts struct {
	outcomes [firingstats.NumOutcomes]int64
	lateness []int64
}

func (m *minuteCounts) total() int64 {
	var n int64
	for _, v := range m.outcomes {
		n += v
	}
	return n
}

func (m *minuteCounts) add(o *minuteCounts) {
	for i, v := range o.outcomes {
		m.outcomes[i] += v
	}
	if m.lateness == nil {
		m.lateness = make([]int64, firingstats.Buckets)
	}
	for i, v := range o.lateness {
		if i < len(m.lateness) {
			m.lateness[i] += v
		}
	}
}

// rollupWindow reads the rollup's minutes in [start, end] (tenant "":
// every tenant), one minuteCounts per minute that has a row, keyed by the
// minute's Unix seconds. Priorities (and tenants) are summed in Go: a
// bucket array does not sum in one aggregate, and the rows are few.
func (c *Console) rollupWindow(ctx context.Context, tenant string, start, end time.Time) (map[int64]*minuteCounts, error) {
	q := `SELECT minute, succeeded, failed, retried, dead, skipped, cancelled, other, lateness FROM firing_minutes WHERE minute >= $1 AND minute <= $2`
	args := []any{start, end}
	if tenant != "" {
		q += ` AND tenant = $3`
		args = append(args, tenant)
	}
	rows, err := c.cfg.Pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]*minuteCounts{}
	for rows.Next() {
		var at time.Time
		var m minuteCounts
		o := &m.outcomes
		if err := rows.Scan(&at, &o[firingstats.Succeeded], &o[firingstats.Failed], &o[firingstats.Retried], &o[firingstats.Dead],
			&o[firingstats.Skipped], &o[firingstats.Cancelled], &o[firingstats.Other], &m.lateness); err != nil {
			return nil, err
		}
		k := at.Unix()
		if have := out[k]; have != nil {
			have.add(&m)
		} else {
			sum := &minuteCounts{}
			sum.add(&m)
			out[k] = sum
		}
	}
	return out, rows.Err()
}

// rollupNumbers are the tiles of a window (the last hour or day).
type rollupNumbers struct {
	Firings, Succeeded, Failed, Dead, Retried, Skipped string
	// PerMinute is the window's firings per minute on average.
	PerMinute string
	// SuccessRate is succeeded over the attempts that ended (succeeded,
	// failed, retried, dead), as a percentage; "–" when none did.
	SuccessRate string
	P50, P99    string
}

func numbersOf(ms map[int64]*minuteCounts, minutes int) rollupNumbers {
	var sum minuteCounts
	sum.lateness = make([]int64, firingstats.Buckets)
	for _, m := range ms {
		sum.add(m)
	}
	o := sum.outcomes
	n := rollupNumbers{
		Firings: countText(sum.total()), Succeeded: countText(o[firingstats.Succeeded]), Failed: countText(o[firingstats.Failed]),
		Dead: countText(o[firingstats.Dead]), Retried: countText(o[firingstats.Retried]), Skipped: countText(o[firingstats.Skipped]),
		PerMinute:   strconv.FormatFloat(float64(sum.total())/float64(minutes), 'f', 1, 64),
		SuccessRate: "–", P50: latenessText(firingstats.Quantile(sum.lateness, 0.5)), P99: latenessText(firingstats.Quantile(sum.lateness, 0.99)),
	}
	if ended := o[firingstats.Succeeded] + o[firingstats.Failed] + o[firingstats.Retried] + o[firingstats.Dead]; ended > 0 {
		n.SuccessRate = strconv.FormatFloat(100*float64(o[firingstats.Succeeded])/float64(ended), 'f', 1, 64) + "%"
	}
	return n
}

func countText(n int64) string { return strconv.FormatInt(n, 10) }

// latenessText prints seconds as a duration, "–" for none.
func latenessText(s float64) string {
	if math.IsNaN(s) {
		return "–"
	}
	d := time.Duration(s * float64(time.Second))
	if d >= time.Second {
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

// rollupCharts draws the hour's minutes: firings per minute by outcome
// (the columns that counted anything, succeeded and dead always), and
// lateness p50 and p99 per minute. A minute without a row counts 0
// firings and has no lateness (a gap).
func rollupCharts(ms map[int64]*minuteCounts, start time.Time, idPrefix, who string) []*lineChart {
	const n = 60
	lines := make([]series, firingstats.NumOutcomes)
	p50 := series{Labels: map[string]string{"q": "p50"}, Values: make([]float64, n)}
	p99 := series{Labels: map[string]string{"q": "p99"}, Values: make([]float64, n)}
	for c := range lines {
		lines[c] = series{Labels: map[string]string{"outcome": firingstats.Columns[c]}, Values: make([]float64, n)}
	}
	for i := range n {
		m := ms[start.Add(time.Duration(i)*time.Minute).Unix()]
		p50.Values[i], p99.Values[i] = math.NaN(), math.NaN()
		if m == nil {
			continue
		}
		for c := range lines {
			lines[c].Values[i] = float64(m.outcomes[c])
		}
		p50.Values[i], p99.Values[i] = firingstats.Quantile(m.lateness, 0.5), firingstats.Quantile(m.lateness, 0.99)
	}
	var drawn []series
	for c, s := range lines {
		if c == firingstats.Succeeded || c == firingstats.Dead || slices.ContainsFunc(s.Values, func(v float64) bool { return v > 0 }) {
			drawn = append(drawn, s)
		}
	}
	cnt := func(v float64) string { return strconv.FormatFloat(math.Round(v), 'f', -1, 64) }
	var out []*lineChart
	if ch := drawChart(idPrefix+"firings-chart", "Firings per minute by outcome, "+who+", last hour (the rollup; the last minute so far)", "firings", drawn,
		func(s series) string { return s.Labels["outcome"] }, cnt, start, time.Minute); ch != nil {
		// No rate of the newest minute (perSecond): it is still filling,
		// and the workers add to it every 10 s.
		out = append(out, ch)
	}
	if ch := drawChart(idPrefix+"lateness-chart", "Lateness at the target, p50 and p99 per minute, "+who+", last hour (the rollup)", "", []series{p50, p99},
		func(s series) string { return s.Labels["q"] }, latenessText, start, time.Minute); ch != nil {
		for i := range ch.Lines {
			ch.Lines[i].Total = "" // a sum of percentiles means nothing
		}
		out = append(out, ch)
	}
	return out
}

// running is what the workers executed at their last flush (at most 30 s
// ago; a worker silent longer is gone): the attempts and the workers.
func (c *Console) running(ctx context.Context, tenant string) (attempts, workers int64, err error) {
	q := `SELECT coalesce(sum(running), 0), count(DISTINCT worker_id) FROM worker_running WHERE updated_at > now() - interval '30 seconds'`
	var args []any
	if tenant != "" {
		q += ` AND tenant = $1`
		args = append(args, tenant)
	}
	err = c.cfg.Pool.QueryRow(ctx, q, args...).Scan(&attempts, &workers)
	return attempts, workers, err
}

// ownNumbers is the overview's rollup part for one tenant ("" for the
// platform): the hour's and day's tiles, the hour's charts and what runs
// now.
type ownNumbers struct {
	Hour, Day        rollupNumbers
	Charts           []*lineChart
	Running, Workers string
	// Empty: no row in the day (no worker with --postgres-dsn fired any).
	Empty bool
}

func (c *Console) ownNumbers(ctx context.Context, tenant string, withDay bool) (*ownNumbers, error) {
	now := c.cfg.Clock.Now().UTC()
	last := now.Truncate(time.Minute)
	hourStart := last.Add(-59 * time.Minute)
	from := hourStart
	if withDay {
		from = last.Add(-(24*60 - 1) * time.Minute)
	}
	ms, err := c.rollupWindow(ctx, tenant, from, last)
	if err != nil {
		return nil, fmt.Errorf("firing_minutes: %w", err)
	}
	hour := make(map[int64]*minuteCounts, 60)
	for k, m := range ms {
		if k >= hourStart.Unix() {
			hour[k] = m
		}
	}
	prefix, who := "", "yours"
	if tenant == "" {
		prefix, who = "platform-rollup-", "every tenant"
	}
	v := &ownNumbers{Hour: numbersOf(hour, 60), Charts: rollupCharts(hour, hourStart, prefix, who), Empty: len(ms) == 0}
	if withDay {
		v.Day = numbersOf(ms, 24*60)
	}
	r, w, err := c.running(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("worker_running: %w", err)
	}
	v.Running, v.Workers = countText(r), countText(w)
	return v, nil
}

// outboxCap bounds the outbox count: past it the tile says "100000+".
const outboxCap = 100000

// leader is one row of leader_epochs: an election (a range of the
// prefetchers' jobs, or the relay's) and who last wrote in it.
type leader struct {
	Election, Leader, Epoch, Updated string
}

// groupLag is one priority topic's consumer lag, as a worker last wrote it.
type groupLag struct {
	Priority, Topic, Records, Updated string
	// Stale: not written for lagFresh (no worker could read Kafka, or
	// none runs); shown with its age, not as the lag now.
	Stale bool
}

// lagFresh is how old a group_lag row may be before it is shown as stale:
// workers write it every ~10 s.
const lagFresh = time.Minute

// component is one dependency of the api: reachable or not, how fast.
type component struct {
	Name, Error, Latency string
	OK                   bool
}

// platformOwn is the operator's panel from Postgres and the api's own
// connections: every tenant's rollup, the outbox, the leaders, the
// components.
type platformOwn struct {
	Numbers              *ownNumbers
	OutboxDue, OutboxAll string
	Lag                  []groupLag
	Leaders              []leader
	Components           []component
	// Instances are the services' own reports (service_instances), and
	// Reached the components as those reports see them.
	Instances []serviceInstance
	Reached   []reachedComponent
}

func (c *Console) platformOwn(ctx context.Context) (*platformOwn, error) {
	p := &platformOwn{}
	var err error
	if p.Numbers, err = c.ownNumbers(ctx, "", false); err != nil {
		return nil, err
	}
	var due, all int64
	if err := c.cfg.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM (SELECT 1 FROM outbox WHERE publish_at <= now() LIMIT $1) d),
		(SELECT count(*) FROM (SELECT 1 FROM outbox LIMIT $1) a)`, outboxCap+1).Scan(&due, &all); err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	capped := func(n int64) string {
		if n > outboxCap {
			return countText(outboxCap) + "+"
		}
		return countText(n)
	}
	p.OutboxDue, p.OutboxAll = capped(due), capped(all)
	if p.Lag, err = c.groupLag(ctx); err != nil {
		return nil, err
	}
	rows, err := c.cfg.Pool.Query(ctx, `SELECT election, leader, epoch, updated_at FROM leader_epochs ORDER BY election LIMIT 500`)
	if err != nil {
		return nil, fmt.Errorf("leader_epochs: %w", err)
	}
	defer rows.Close()
	now := c.cfg.Clock.Now()
	for rows.Next() {
		var l leader
		var epoch int64
		var at time.Time
		if err := rows.Scan(&l.Election, &l.Leader, &epoch, &at); err != nil {
			return nil, err
		}
		l.Epoch = countText(epoch)
		l.Updated = at.UTC().Format("2006-01-02 15:04:05Z") + " (" + now.Sub(at).Round(time.Second).String() + " ago)"
		p.Leaders = append(p.Leaders, l)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if p.Instances, p.Reached, err = c.instancesView(ctx); err != nil {
		return nil, err
	}
	p.Components = c.probe(ctx)
	return p, nil
}

// groupLag reads group_lag (a row per priority topic), most urgent first.
func (c *Console) groupLag(ctx context.Context) ([]groupLag, error) {
	rows, err := c.cfg.Pool.Query(ctx, `SELECT topic, records, updated_at FROM group_lag ORDER BY topic LIMIT 100`)
	if err != nil {
		return nil, fmt.Errorf("group_lag: %w", err)
	}
	defer rows.Close()
	now := c.cfg.Clock.Now()
	type row struct {
		rank int
		lag  groupLag
	}
	var out []row
	for rows.Next() {
		var topic string
		var records int64
		var at time.Time
		if err := rows.Scan(&topic, &records, &at); err != nil {
			return nil, err
		}
		l := groupLag{Topic: topic, Records: countText(records), Priority: "–", Stale: now.Sub(at) > lagFresh,
			Updated: now.Sub(at).Round(time.Second).String() + " ago"}
		rank := 5 // after the four priorities (CRITICAL is 1)
		if p, ok := firing.FirePriority(topic); ok {
			l.Priority, rank = firing.PriorityName(p), int(p)
		}
		out = append(out, row{rank, l})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b row) int { return a.rank - b.rank })
	lags := make([]groupLag, len(out))
	for i, r := range out {
		lags[i] = r.lag
	}
	return lags, nil
}

// probe checks every component the api connects to (Config.Components)
// at once, each within 2 s, and times it: the same run of checks each
// service reports of itself (instances.Run).
func (c *Console) probe(ctx context.Context) []component {
	checks := make(map[string]admin.Check, len(c.cfg.Components))
	for n, f := range c.cfg.Components {
		checks[n] = f
	}
	ran := instances.Run(ctx, checks, 2*time.Second, c.cfg.Clock)
	out := make([]component, len(ran))
	for i, r := range ran {
		out[i] = component{Name: r.Name, OK: r.OK, Error: r.Error, Latency: (time.Duration(r.Ms*1000) * time.Microsecond).Round(10 * time.Microsecond).String()}
	}
	return out
}
