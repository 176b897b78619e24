package forecast

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Limits and defaults of Options.
const (
	MaxWindow = 7 * 24 * time.Hour

	DefaultMaxSchedules  = 200_000
	DefaultMaxFirings    = 50_000_000
	DefaultHerdThreshold = 100
	DefaultMaxHerds      = 20
	DefaultJobsPerHerd   = 20
	DefaultPeakMinutes   = 5
	// maxTenantSeries bounds the tenants given a per-minute series of
	// their own; the rest are summed as OtherTenants. A series is 10,080
	// counters over seven days, so this keeps the breakdown within a few MB.
	maxTenantSeries = 100
	// OtherTenants names the series of the tenants past maxTenantSeries.
	OtherTenants = "(other tenants)"
	// maxJitterSec is jobspec.MaxJitter in seconds.
	maxJitterSec = 60
)

// Job is what the forecast needs of one job.
type Job struct {
	ID, Tenant, Name string
	Priority         sundialv1.Priority
	// Jitter is the job's max_jitter.
	Jitter time.Duration
	// Expr is the schedule as shown to people ("0 0 * * *", "every 90s").
	Expr string
	// Cron is the job's cron expression when its schedule is one plain
	// cron expression, for the H suggestion; empty otherwise.
	Cron string
	// Zone is the schedule's IANA zone name, for display and for the H
	// suggestion.
	Zone string
	// Key is equal for jobs whose schedules have the same firings; the
	// schedule of a Key is built (Build) and enumerated once.
	Key string
	// Build makes the job's engine schedule. Called once per Key.
	Build func() (schedule.Schedule, error)
}

// Options says what to forecast and within which bounds.
type Options struct {
	// From is the start of the window, truncated to the minute; Window its
	// length, at most MaxWindow. The window is [From, From+Window).
	From   time.Time
	Window time.Duration
	// MaxSchedules caps the distinct schedules (Keys) evaluated and
	// MaxFirings the Next calls in all; see the package documentation.
	MaxSchedules, MaxFirings int
	// HerdThreshold is how many firings due at one instant make a herd.
	HerdThreshold int
	// MaxHerds caps the herds reported (the largest first); JobsPerHerd
	// the jobs listed per schedule in a herd; PeakMinutes the busiest
	// minutes given a per-second breakdown.
	MaxHerds, JobsPerHerd, PeakMinutes int
}

// Validate checks the options; errors name the field.
func (o *Options) Validate() error {
	var errs []error
	if o.From.IsZero() {
		errs = append(errs, errors.New("from: is required"))
	}
	if o.Window <= 0 || o.Window > MaxWindow || o.Window%time.Minute != 0 {
		errs = append(errs, fmt.Errorf("window: must be whole minutes between 1m and %s, got %s", MaxWindow, o.Window))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"max_schedules", o.MaxSchedules}, {"max_firings", o.MaxFirings}, {"herd_threshold", o.HerdThreshold}, {"max_herds", o.MaxHerds}, {"jobs_per_herd", o.JobsPerHerd}, {"peak_minutes", o.PeakMinutes}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %d", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.MaxSchedules, DefaultMaxSchedules)
	def(&o.MaxFirings, DefaultMaxFirings)
	def(&o.HerdThreshold, DefaultHerdThreshold)
	def(&o.MaxHerds, DefaultMaxHerds)
	def(&o.JobsPerHerd, DefaultJobsPerHerd)
	def(&o.PeakMinutes, DefaultPeakMinutes)
}

// class is the jobs of one Key that count alike.
type class struct {
	tenant   int // index into Builder.tenants
	priority sundialv1.Priority
	jitter   int // max_jitter in whole seconds, rounded up
}

// group is every job sharing one Key.
type group struct {
	key     string
	expr    string
	cron    string
	zone    string
	build   func() (schedule.Schedule, error)
	jobs    int
	classes map[class]int
	sample  []Job // the first JobsPerHerd jobs, for the herd listing
}

// Builder collects jobs and computes their Forecast. It is not safe for
// concurrent use.
type Builder struct {
	opts      Options
	groups    map[string]*group
	tenants   []string
	tenantIdx map[string]int
	jobs      int
}

// New returns a Builder for opts.
func New(opts Options) (*Builder, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.defaults()
	return &Builder{opts: opts, groups: map[string]*group{}, tenantIdx: map[string]int{}}, nil
}

// Add counts one job. It does no schedule work: that happens once per Key
// in Forecast.
func (b *Builder) Add(j Job) {
	b.AddN(j, 1, []Job{j})
}

// AddN counts n jobs alike in j's Key, tenant, priority and jitter (a
// Decoder.Count), listing the jobs of sample in a herd. Like Add, it does
// no schedule work.
func (b *Builder) AddN(j Job, n int, sample []Job) {
	if n <= 0 {
		return
	}
	b.jobs += n
	g := b.groups[j.Key]
	if g == nil {
		g = &group{key: j.Key, expr: j.Expr, cron: j.Cron, zone: j.Zone, build: j.Build, classes: map[class]int{}}
		b.groups[j.Key] = g
	}
	g.jobs += n
	ti, ok := b.tenantIdx[j.Tenant]
	if !ok {
		ti = len(b.tenants)
		b.tenants = append(b.tenants, j.Tenant)
		b.tenantIdx[j.Tenant] = ti
	}
	js := int(min((j.Jitter+time.Second-1)/time.Second, maxJitterSec))
	g.classes[class{tenant: ti, priority: j.Priority, jitter: max(js, 0)}] += n
	for _, s := range sample {
		if len(g.sample) >= b.opts.JobsPerHerd {
			break
		}
		s.Build = nil // the group keeps one; the sample is for display
		g.sample = append(g.sample, s)
	}
}

// Forecast is the load to come.
type Forecast struct {
	From   time.Time
	Window time.Duration
	// Jobs and Schedules are what was counted: jobs, and distinct
	// schedules evaluated. Firings is the firings due in the window.
	Jobs, Schedules int
	Firings         int64
	// Minutes[i] is the firings due in [From+i min, From+(i+1) min).
	Minutes []int64
	// ByPriority and ByTenant break the minutes down, largest total first.
	ByPriority []Series
	ByTenant   []Series
	// Peaks are the busiest minutes, busiest first, with their seconds.
	Peaks []Peak
	// Herds are the instants with at least HerdThreshold firings due,
	// largest first.
	Herds []Herd
	// Partial is set when a cap stopped the count: why, and what was
	// left out. Failed counts the jobs whose schedule did not build.
	Partial       string
	SkippedJobs   int
	SkippedScheds int
	Failed        int
}

// Series is one tenant's or priority's share.
type Series struct {
	Name    string
	Total   int64
	Peak    int64     // the busiest minute's firings
	PeakAt  time.Time // its start
	Minutes []int64
}

// Peak is one busy minute.
type Peak struct {
	At      time.Time
	Firings int64
	// Due[s] is the firings due at second s of the minute; Expected[s]
	// what fires in that second once jitter has spread the due firings
	// (from this minute and the one before).
	Due      [60]int64
	Expected [60]float64
}

// Herd is one instant with many firings due.
type Herd struct {
	At       time.Time
	Firings  int64
	NoJitter int64
	// ExpectedPeak is the most firings expected in one second within a
	// minute of At once jitter has spread them.
	ExpectedPeak float64
	Schedules    []HerdSchedule
	// MoreSchedules counts the schedules in the herd not listed.
	MoreSchedules int
}

// HerdSchedule is the jobs of one distinct schedule in a herd.
type HerdSchedule struct {
	Expr, Zone string
	Jobs       int
	NoJitter   int
	// SuggestJitter is a max_jitter that spreads this herd's firings over
	// a minute (zero when the jobs already have one); SuggestH an H form
	// of the expression (empty when there is none to give).
	SuggestJitter time.Duration
	SuggestH      string
	Sample        []HerdJob
	MoreJobs      int
}

// HerdJob is one job of a herd.
type HerdJob struct {
	ID, Tenant, Name string
	Jitter           time.Duration
	// Slot is where SuggestH would put this job: the expression with its
	// H fields resolved by the job's id.
	Slot string
}

// Forecast computes the forecast of the jobs added.
func (b *Builder) Forecast() *Forecast {
	o := b.opts
	from := o.From.Truncate(time.Minute).UTC()
	secs := int(o.Window / time.Second)
	mins := secs / 60
	f := &Forecast{From: from, Window: o.Window, Jobs: b.jobs, Minutes: make([]int64, mins)}

	due := make([]int32, secs)        // firings due at each second
	noJit := make([]int32, secs)      // of them, from jobs without jitter
	spread := make([]float64, secs+1) // jittered load, as differences
	var byPrio [5][]int64
	tenantSeries := make([][]int64, min(len(b.tenants), maxTenantSeries+1))
	for i := range tenantSeries {
		tenantSeries[i] = make([]int64, mins)
	}
	tenantRow := func(ti int) []int64 { return tenantSeries[min(ti, maxTenantSeries)] }

	groups := make([]*group, 0, len(b.groups))
	for _, g := range b.groups {
		groups = append(groups, g)
	}
	// Most-shared schedules first, so a cap drops the rare ones.
	slices.SortFunc(groups, func(a, c *group) int {
		return cmp.Or(cmp.Compare(c.jobs, a.jobs), cmp.Compare(a.key, c.key))
	})

	var evaluated []groupSchedule
	budget := o.MaxFirings
	for gi, g := range groups {
		if len(evaluated) >= o.MaxSchedules || budget <= 0 {
			for _, rest := range groups[gi:] {
				f.SkippedScheds++
				f.SkippedJobs += rest.jobs
			}
			why := "max_schedules"
			if budget <= 0 {
				why = "max_firings"
			}
			f.Partial = fmt.Sprintf("stopped at %s: %d jobs in %d rarer schedules not counted", why, f.SkippedJobs, f.SkippedScheds)
			break
		}
		s, err := g.build()
		if err != nil || s == nil {
			f.Failed += g.jobs
			continue
		}
		evaluated = append(evaluated, groupSchedule{g, s})
		classes := make([]class, 0, len(g.classes))
		for c := range g.classes {
			classes = append(classes, c)
		}
		slices.SortFunc(classes, func(a, c class) int {
			return cmp.Or(cmp.Compare(a.tenant, c.tenant), cmp.Compare(a.priority, c.priority), cmp.Compare(a.jitter, c.jitter))
		})
		// Firings are whole seconds, so Next from a second before From
		// starts the window at From itself: [From, From+Window).
		for t := s.Next(from.Add(-time.Second)); !t.IsZero(); t = s.Next(t) {
			budget--
			i := int(t.Unix() - from.Unix())
			if i >= secs {
				break
			}
			if i < 0 { // a schedule's Next never goes back; defensive
				continue
			}
			m := i / 60
			for _, c := range classes {
				n := g.classes[c]
				due[i] += int32(n)
				f.Minutes[m] += int64(n)
				if c.jitter == 0 {
					noJit[i] += int32(n)
					spread[i] += float64(n)
					spread[i+1] -= float64(n)
				} else {
					per := float64(n) / float64(c.jitter)
					spread[i] += per
					spread[min(i+c.jitter, secs)] -= per
				}
				p := int(c.priority)
				if p < 0 || p >= len(byPrio) {
					p = 0
				}
				if byPrio[p] == nil {
					byPrio[p] = make([]int64, mins)
				}
				byPrio[p][m] += int64(n)
				tenantRow(c.tenant)[m] += int64(n)
			}
			if budget <= 0 {
				break
			}
		}
	}
	f.Schedules = len(evaluated)
	for _, n := range f.Minutes {
		f.Firings += n
	}
	expected := make([]float64, secs)
	run := 0.0
	for i := range secs {
		run += spread[i]
		expected[i] = run
	}

	for p, row := range byPrio {
		if row != nil {
			f.ByPriority = append(f.ByPriority, series(sundialv1.Priority(p).String(), row, from))
		}
	}
	for ti, row := range tenantSeries {
		name := OtherTenants
		if ti < maxTenantSeries {
			name = b.tenants[ti]
		}
		f.ByTenant = append(f.ByTenant, series(name, row, from))
	}
	for _, ss := range [][]Series{f.ByPriority, f.ByTenant} {
		slices.SortFunc(ss, func(a, c Series) int { return cmp.Or(cmp.Compare(c.Total, a.Total), cmp.Compare(a.Name, c.Name)) })
	}

	f.Peaks = peaks(f.Minutes, due, expected, from, o.PeakMinutes)
	f.Herds = herds(due, noJit, expected, from, o, evaluated)
	return f
}

// groupSchedule is a group with its built schedule.
type groupSchedule struct {
	g *group
	s schedule.Schedule
}

func series(name string, row []int64, from time.Time) Series {
	s := Series{Name: name, Minutes: row, PeakAt: from}
	for i, n := range row {
		s.Total += n
		if n > s.Peak {
			s.Peak, s.PeakAt = n, from.Add(time.Duration(i)*time.Minute)
		}
	}
	return s
}

// peaks returns the k busiest minutes with their seconds.
func peaks(minutes []int64, due []int32, expected []float64, from time.Time, k int) []Peak {
	idx := make([]int, 0, len(minutes))
	for i, n := range minutes {
		if n > 0 {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, c int) int { return cmp.Or(cmp.Compare(minutes[c], minutes[a]), cmp.Compare(a, c)) })
	out := make([]Peak, 0, min(k, len(idx)))
	for _, m := range idx[:min(k, len(idx))] {
		p := Peak{At: from.Add(time.Duration(m) * time.Minute), Firings: minutes[m]}
		for s := range 60 {
			if i := m*60 + s; i < len(due) {
				p.Due[s] = int64(due[i])
				p.Expected[s] = math.Round(expected[i]*10) / 10
			}
		}
		out = append(out, p)
	}
	return out
}

// herds finds the instants with at least o.HerdThreshold firings due and
// lists the schedules that make them. Second i of the arrays is the
// instant from+i s.
func herds(due, noJit []int32, expected []float64, from time.Time, o Options, gs []groupSchedule) []Herd {
	var idx []int
	for i, n := range due {
		if int(n) >= o.HerdThreshold {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, c int) int { return cmp.Or(cmp.Compare(due[c], due[a]), cmp.Compare(a, c)) })
	idx = idx[:min(len(idx), o.MaxHerds)]
	out := make([]Herd, 0, len(idx))
	for _, i := range idx {
		at := from.Add(time.Duration(i) * time.Second)
		h := Herd{At: at, Firings: int64(due[i]), NoJitter: int64(noJit[i])}
		for j := max(i-maxJitterSec, 0); j < min(i+maxJitterSec+1, len(expected)); j++ {
			h.ExpectedPeak = max(h.ExpectedPeak, math.Round(expected[j]*10)/10)
		}
		var in []HerdSchedule
		for _, e := range gs {
			if !e.s.Next(at.Add(-time.Second)).Equal(at) {
				continue
			}
			in = append(in, herdSchedule(e.g, o.JobsPerHerd))
		}
		slices.SortFunc(in, func(a, c HerdSchedule) int { return cmp.Or(cmp.Compare(c.Jobs, a.Jobs), cmp.Compare(a.Expr, c.Expr)) })
		const listed = 10
		if len(in) > listed {
			h.MoreSchedules = len(in) - listed
			in = in[:listed]
		}
		h.Schedules = in
		out = append(out, h)
	}
	return out
}

func herdSchedule(g *group, perHerd int) HerdSchedule {
	hs := HerdSchedule{Expr: g.expr, Zone: g.zone, Jobs: g.jobs, MoreJobs: max(g.jobs-len(g.sample), 0)}
	for c, n := range g.classes {
		if c.jitter == 0 {
			hs.NoJitter += n
		}
	}
	if hs.NoJitter > 0 {
		hs.SuggestJitter = maxJitterSec * time.Second
	}
	hs.SuggestH = SuggestH(g.cron)
	loc, _ := time.LoadLocation(g.zone)
	for _, j := range g.sample[:min(len(g.sample), perHerd)] {
		hj := HerdJob{ID: j.ID, Tenant: j.Tenant, Name: j.Name, Jitter: j.Jitter}
		if hs.SuggestH != "" {
			if s, err := schedule.Parse(hs.SuggestH, schedule.Options{HashSeed: j.ID, Location: loc}); err == nil {
				hj.Slot = s.String()
			}
		}
		hs.Sample = append(hs.Sample, hj)
	}
	return hs
}
