// Package misfire judges the firings that reach the worker's fire stage
// late, by each job's own misfire policy (pkg/domain/misfire, the one the
// prefetcher applies to slots that went by unstaged), so a platform that
// fell behind sheds what its users asked it to shed instead of firing
// everything however late.
//
// A firing is late when it reaches the stage more than Threshold after its
// fire instant. Only firings of origin SCHEDULE (or unspecified) that are
// not catch-ups are judged: retries, triggers, backfills and re-drives were
// asked for explicitly, and a catch-up was already judged by the prefetcher.
// A late firing is then
//
//   - expired when later than the job's grace: skipped;
//   - under SKIP: skipped;
//   - under RUN_ONCE: fired only if no newer firing of the job is late
//     too; the older ones are skipped as superseded;
//   - under RUN_ALL: fired only if fewer than max_catch_up newer firings of
//     the job are late too, so the most recent max_catch_up fire.
//
// "Newer" needs every firing of the job this worker holds, not only those
// that reached the stage: a job's firings all go to one partition (the
// record key is the job id), so the worker that judges them saw every one
// arrive, and the consumer reports each arrival (Arrived) before holding
// it. The judge keeps per job the instants it was told of, compacted at
// each judgment: of the instants already late it keeps only the newest
// max_catch_up (1 for RUN_ONCE), which answer every later question since
// the late boundary only moves forward. A job is forgotten once its newest
// instant is older than its grace (at most MaxGrace): its firings are
// expired by then whatever the judge remembers. So memory is bounded by
// the firings held plus a few instants per recently late job.
package misfire

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/misfire"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Config of a Judge.
type Config struct {
	// Threshold: a firing is late (a misfire) only when it reaches the stage
	// more than this after its fire instant; ordinary delays are not
	// misfires. The prefetcher's --misfire-threshold, 5 s by default.
	Threshold time.Duration
	// MaxGrace bounds how long a job is remembered after its newest
	// instant, whatever its grace (which may be up to 7 days): a worker
	// further behind than this judges an old firing without knowing of
	// newer ones, and fires it. Default 1 h (the default grace).
	MaxGrace time.Duration
}

// Defaults.
const (
	DefaultThreshold = 5 * time.Second
	DefaultMaxGrace  = misfire.DefaultGrace
)

// Validate checks the config, naming the field at fault.
func (c Config) Validate() error {
	if c.Threshold < 0 {
		return fmt.Errorf("misfire-threshold: must not be negative, got %s", c.Threshold)
	}
	if c.MaxGrace < 0 {
		return fmt.Errorf("misfire-max-grace: must not be negative, got %s", c.MaxGrace)
	}
	return nil
}

// Verdict is what to do with one firing.
type Verdict struct {
	// Fire: send it. Otherwise record it SKIPPED with Reason.
	Fire bool
	// Late is how late the firing reached the stage, when it was judged
	// late (more than the threshold); 0 otherwise. A late firing may still
	// fire (RUN_ONCE's newest, RUN_ALL's most recent).
	Late time.Duration
	// Kind says why it does not fire: misfire.Expired or
	// misfire.NotReplayed (the policy); 0 when it fires.
	Kind misfire.Kind
	// Reason is the ledger's reason for the skip, the prefetcher's words for
	// the same case.
	Reason string
}

// Judge is safe for concurrent use.
type Judge struct {
	threshold, maxGrace time.Duration
	clk                 clock.Clock

	mu     sync.Mutex
	jobs   map[string]*job
	pruned time.Time
}

// job is what the judge knows of one job's firings.
type job struct {
	// instants (Unix ns, ascending, distinct) of the job's judged firings
	// this worker was told of: every one not yet late, and the newest keep
	// of those already late.
	instants []int64
	keep     int
	// forget is the job's grace, capped by MaxGrace: the job is forgotten
	// once its newest instant is older than that.
	forget time.Duration
}

// New returns a judge reading the worker's corrected clock.
func New(cfg Config, clk clock.Clock) *Judge {
	if cfg.Threshold == 0 {
		cfg.Threshold = DefaultThreshold
	}
	if cfg.MaxGrace == 0 {
		cfg.MaxGrace = DefaultMaxGrace
	}
	return &Judge{threshold: cfg.Threshold, maxGrace: cfg.MaxGrace, clk: clk, jobs: map[string]*job{}}
}

// Judged reports whether f is subject to the misfire policy when late:
// a firing of the job's schedule, not a catch-up (already judged by the
// prefetcher), retry, trigger, backfill or re-drive.
func Judged(f *sundialv1.Firing) bool {
	switch f.GetOrigin() {
	case sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE, sundialv1.FiringOrigin_FIRING_ORIGIN_UNSPECIFIED:
		return !f.GetCatchUp()
	default:
		return false
	}
}

// instant is the firing's fire instant (the slot plus jitter), by which
// lateness is measured and firings of a job are ordered.
func instant(f *sundialv1.Firing) int64 {
	if t := f.GetFireTime(); t != nil {
		return t.AsTime().UnixNano()
	}
	return f.GetScheduledTime().AsTime().UnixNano()
}

// Arrived tells the judge of a firing the worker received and holds, so
// that an older firing of the same job reaching the stage late knows a
// newer one exists. Call it for every firing on arrival, before it is
// held; firings that are not judged are ignored.
func (j *Judge) Arrived(f *sundialv1.Firing) {
	if !Judged(f) || f.GetJobId() == "" {
		return
	}
	now := j.clk.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.prune(now)
	if misfire.Of(f.GetMisfire()).Keep() == 0 {
		// SKIP: every late firing is skipped, newer ones or not.
		delete(j.jobs, f.GetJobId())
		return
	}
	j.note(f, instant(f))
}

// note records instant at of f's job. Called with j.mu held.
func (j *Judge) note(f *sundialv1.Firing, at int64) *job {
	p := misfire.Of(f.GetMisfire())
	jb := j.jobs[f.GetJobId()]
	if jb == nil {
		jb = &job{}
		j.jobs[f.GetJobId()] = jb
	}
	// The newest envelope's policy wins: an edit that changed it also
	// changed the version, and older firings are then dropped as stale.
	jb.keep, jb.forget = p.Keep(), min(p.Grace, j.maxGrace)
	n := len(jb.instants)
	switch {
	case n == 0 || jb.instants[n-1] < at:
		// The usual case: a job's firings arrive in order.
		jb.instants = append(jb.instants, at)
	default:
		if i, found := slices.BinarySearch(jb.instants, at); !found {
			jb.instants = slices.Insert(jb.instants, i, at)
		}
	}
	return jb
}

// Judge decides whether f, reaching the stage now, fires. A firing that
// is not late, or not judged (Judged), always fires.
func (j *Judge) Judge(f *sundialv1.Firing) Verdict {
	if !Judged(f) {
		return Verdict{Fire: true}
	}
	now := j.clk.Now()
	at := instant(f)
	late := time.Duration(now.UnixNano() - at)
	if late <= j.threshold {
		return Verdict{Fire: true}
	}
	p := misfire.Of(f.GetMisfire())
	v := Verdict{Late: late}
	if late > p.Grace {
		v.Kind = misfire.Expired
	} else if p.Keep() > 0 {
		cut := now.Add(-j.threshold).UnixNano()
		j.mu.Lock()
		j.prune(now)
		jb := j.note(f, at)
		// Newer firings of the job that are late too: instants in (at, cut).
		lo, _ := slices.BinarySearch(jb.instants, at)
		hi, _ := slices.BinarySearch(jb.instants, cut)
		newer := max(hi-lo-1, 0)
		jb.compact(cut)
		j.mu.Unlock()
		if newer < p.Keep() {
			v.Fire = true
			return v
		}
		v.Kind = misfire.NotReplayed
	} else {
		v.Kind = misfire.NotReplayed
	}
	v.Reason = p.Reason(v.Kind)
	return v
}

// compact drops the late instants beyond the newest keep: the late
// boundary only moves forward, so they can never again make a difference
// to whether a firing has keep newer late ones.
func (jb *job) compact(cut int64) {
	hi, _ := slices.BinarySearch(jb.instants, cut)
	if drop := hi - max(jb.keep, 1); drop > 0 {
		jb.instants = slices.Delete(jb.instants, 0, drop)
	}
}

// Jobs is how many jobs the judge remembers.
func (j *Judge) Jobs() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.jobs)
}

// prune forgets the jobs whose newest instant is older than their grace
// (capped by MaxGrace), and compacts the others, at most once per tenth of
// MaxGrace. Called with j.mu held.
func (j *Judge) prune(now time.Time) {
	if now.Sub(j.pruned) < j.maxGrace/10 {
		return
	}
	j.pruned = now
	cut := now.Add(-j.threshold).UnixNano()
	for id, jb := range j.jobs {
		if len(jb.instants) == 0 || jb.instants[len(jb.instants)-1] < now.Add(-jb.forget).UnixNano() {
			delete(j.jobs, id)
			continue
		}
		jb.compact(cut)
	}
}
