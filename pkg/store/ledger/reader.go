package ledger

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Page sizes of ListByJob.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// DefaultLookback is how far back ListByJob walks day buckets: the TTL,
// since older rows have expired anyway.
const DefaultLookback = TTL

// lookahead starts ListByJob's walk at the day of now+lookahead, so slots
// recorded ahead of time (the prefetcher's window, seconds to minutes) near
// midnight are in the first bucket read, while for the other 23 hours the
// walk starts today and a page of recent history is one query.
const lookahead = time.Hour

// indexSkew widens GetExecution's index read by a day either side of the
// TTL span, for writers whose clocks disagree about the date.
const indexSkew = 24 * time.Hour

var (
	// ErrNotFound is returned by GetExecution when the ledger holds no row
	// of the execution (never recorded, or expired).
	ErrNotFound = errors.New("ledger: execution not found")
	// ErrInvalidPageToken is returned by ListByJob for a token it did not
	// issue for this job.
	ErrInvalidPageToken = errors.New("ledger: invalid page token")
	// ErrInvalidArgument is returned for an empty id.
	ErrInvalidArgument = errors.New("ledger: invalid argument")
)

// Reader reads execution history. It is safe for concurrent use.
type Reader struct {
	s        Session
	keyspace string
	clock    clock.Clock
	lookback time.Duration
	legacy   bool

	selectDay, selectDayAfter, selectIndex, selectExecution string
	selectByJob, selectByJobAfter, selectByID               string
}

// ReaderOption configures a Reader.
type ReaderOption func(*Reader)

// WithClock sets the clock that decides which day ListByJob starts from.
func WithClock(c clock.Clock) ReaderOption { return func(r *Reader) { r.clock = c } }

// WithLookback bounds how far back ListByJob walks day buckets (default
// DefaultLookback, the TTL). Rows of slots scheduled before now-lookback —
// possible only for backfills of old slots — are listed by GetExecution only.
func WithLookback(d time.Duration) ReaderOption { return func(r *Reader) { r.lookback = d } }

// WithoutLegacy stops the Reader from falling back to the first layout's
// tables (executions_by_job, executions_by_id). Their rows expire TTL after
// the upgrade; from then on the fallback only costs queries.
func WithoutLegacy() ReaderOption { return func(r *Reader) { r.legacy = false } }

// NewReader returns a Reader over s reading keyspace. It panics on an
// invalid keyspace name.
func NewReader(s Session, keyspace string, opts ...ReaderOption) *Reader {
	if err := ValidKeyspace(keyspace); err != nil {
		panic(err)
	}
	r := &Reader{s: s, keyspace: keyspace, clock: clock.Real{}, lookback: DefaultLookback, legacy: true}
	for _, o := range opts {
		o(r)
	}
	r.selectDay = fmt.Sprintf("SELECT %s FROM %s.%s WHERE bucket = ? AND day = ? AND job_id = ? LIMIT ?",
		groupedReadColumns, keyspace, TableAttempts)
	r.selectDayAfter = fmt.Sprintf("SELECT %s FROM %s.%s WHERE bucket = ? AND day = ? AND job_id = ?"+
		" AND (scheduled_at, execution_id, attempt, fence) < (?, ?, ?, ?) LIMIT ?", groupedReadColumns, keyspace, TableAttempts)
	r.selectIndex = fmt.Sprintf("SELECT job_id, scheduled_at FROM %s.%s WHERE bucket = ? AND day IN ? AND execution_id = ?",
		keyspace, TableIndex)
	r.selectExecution = fmt.Sprintf("SELECT %s FROM %s.%s WHERE bucket = ? AND day = ? AND job_id = ? AND scheduled_at = ? AND execution_id = ?",
		groupedReadColumns, keyspace, TableAttempts)
	r.selectByJob = fmt.Sprintf("SELECT %s FROM %s.%s WHERE job_id = ? AND month = ? LIMIT ?",
		readColumns, keyspace, TableByJob)
	r.selectByJobAfter = fmt.Sprintf("SELECT %s FROM %s.%s WHERE job_id = ? AND month = ?"+
		" AND (scheduled_at, execution_id, attempt, fence) < (?, ?, ?, ?) LIMIT ?", readColumns, keyspace, TableByJob)
	r.selectByID = fmt.Sprintf("SELECT %s FROM %s.%s WHERE execution_id = ?", readColumns, keyspace, TableByID)
	return r
}

// GetExecution returns every attempt of an execution, oldest attempt first.
// When an attempt was recorded under several fences, the highest fence's
// row comes first and the others are reported as FENCED (see DESIGN.md).
// ErrNotFound when there is no row.
//
// It costs two queries: the index (one multi-partition read over the
// execution id's bucket on every day an entry can still live), then the
// execution's slice of its partition; a third, on the legacy table, when
// the execution is not in the new layout.
func (r *Reader) GetExecution(ctx context.Context, executionID string) ([]*sundialv1.ExecutionAttempt, error) {
	if executionID == "" {
		return nil, fmt.Errorf("%w: execution id is empty", ErrInvalidArgument)
	}
	out, err := r.getExecution(ctx, executionID)
	if err != nil {
		return nil, fmt.Errorf("ledger: get execution %s: %w", executionID, err)
	}
	if len(out) == 0 && r.legacy {
		out, err = r.scanExecution(r.s.Iter(ctx, Statement{CQL: r.selectByID, Values: []any{executionID}, Idempotent: true}), false)
		if err != nil {
			return nil, fmt.Errorf("ledger: get execution %s (legacy): %w", executionID, err)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, executionID)
	}
	return out, nil
}

// GetSlotExecution returns every attempt of an execution whose job and
// slot the caller knows (a worker holding its firing), in GetExecution's
// order and presentation. It reads the execution's slice of its partition
// only: no index read, which spans a partition per day an entry can live.
// ErrNotFound when that slice has no row; it does not look in the legacy
// table, nor under another slot, so a caller unsure of either asks
// GetExecution then.
func (r *Reader) GetSlotExecution(ctx context.Context, jobID string, scheduled time.Time, executionID string) ([]*sundialv1.ExecutionAttempt, error) {
	switch {
	case jobID == "":
		return nil, fmt.Errorf("%w: job id is empty", ErrInvalidArgument)
	case executionID == "":
		return nil, fmt.Errorf("%w: execution id is empty", ErrInvalidArgument)
	case scheduled.IsZero():
		return nil, fmt.Errorf("%w: scheduled time is empty", ErrInvalidArgument)
	}
	out, err := r.slotExecution(ctx, jobID, scheduled, executionID)
	if err != nil {
		return nil, fmt.Errorf("ledger: get execution %s: %w", executionID, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, executionID)
	}
	return out, nil
}

// slotExecution reads an execution's rows from its slot's partition,
// oldest attempt first.
func (r *Reader) slotExecution(ctx context.Context, jobID string, sched time.Time, executionID string) ([]*sundialv1.ExecutionAttempt, error) {
	out, err := r.scanExecution(r.s.Iter(ctx, Statement{CQL: r.selectExecution, Idempotent: true,
		Values: []any{bucketOf(jobID), int(dayOf(sched)), jobID, sched, executionID}}), true)
	if err != nil {
		return nil, err
	}
	// The new layout clusters attempts newest first; callers get the
	// oldest first (each attempt's rows stay highest fence first).
	slices.SortStableFunc(out, func(a, b *sundialv1.ExecutionAttempt) int { return cmp.Compare(a.GetAttempt(), b.GetAttempt()) })
	return out, nil
}

func (r *Reader) getExecution(ctx context.Context, executionID string) ([]*sundialv1.ExecutionAttempt, error) {
	// Entries are dated by the day they were written and live TTL, so the
	// days from TTL ago (plus one, for clock skew) to tomorrow hold all.
	now := r.clock.Now()
	var days []int
	for d, stop := dayOf(now.Add(indexSkew)), dayOf(now.Add(-TTL-indexSkew)); d >= stop; d = d.prev() {
		days = append(days, int(d))
	}
	it := r.s.Iter(ctx, Statement{CQL: r.selectIndex, Values: []any{bucketOf(executionID), days, executionID}, Idempotent: true})
	var (
		jobID string
		sched time.Time
	)
	found := it.Scan(&jobID, &sched)
	for it.Scan(new(string), new(time.Time)) { // one per write day; all name the same slot
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	if !found {
		return nil, nil
	}
	return r.slotExecution(ctx, jobID, sched, executionID)
}

// scanExecution presents one execution's rows, attempt by attempt, from
// a grouped table (packed records) or a legacy one.
func (r *Reader) scanExecution(it Iter, grouped bool) ([]*sundialv1.ExecutionAttempt, error) {
	var (
		out  []*sundialv1.ExecutionAttempt
		prev *groupKey
		sr   scanRow
		bad  error
	)
	for it.Scan(sr.destFor(grouped)...) {
		a := present(&sr, prev)
		if sr.err != nil {
			bad = cmp.Or(bad, sr.err)
			continue
		}
		if a != nil {
			out = append(out, a)
		}
		prev = sr.group(prev)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, bad
}

// ListByJob returns a job's attempts newest slot first (within a slot, the
// latest attempt first), pageSize at a time (<= 0 means DefaultPageSize;
// capped at MaxPageSize). It walks the job's day buckets from tomorrow back
// to the lookback bound — each day one query, one slice of one partition —
// then, unless WithoutLegacy, the legacy table's month buckets (rows
// written before the upgrade). nextPageToken is empty when nothing is left.
// A page may hold fewer rows than asked, and the last page may be empty,
// when the remaining buckets hold no rows.
func (r *Reader) ListByJob(ctx context.Context, jobID string, pageSize int, pageToken string) ([]*sundialv1.ExecutionAttempt, string, error) {
	if jobID == "" {
		return nil, "", fmt.Errorf("%w: job id is empty", ErrInvalidArgument)
	}
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	pageSize = min(pageSize, MaxPageSize)
	var cur cursor
	if pageToken == "" {
		now := r.clock.Now()
		first := int(dayOf(now.Add(lookahead)))
		cur = cursor{Job: jobHash(jobID), Part: first, Start: first, Stop: int(dayOf(now.Add(-r.lookback)))}
	} else {
		var err error
		if cur, err = decodeCursor(pageToken, jobID); err != nil {
			return nil, "", err
		}
	}
	var out []*sundialv1.ExecutionAttempt
	for len(out) < pageSize {
		// Ask for one row more than the page still needs: if it comes back
		// unconsumed, the bucket has more and the token resumes after the
		// last row taken.
		want := pageSize - len(out) + 1
		got, full, err := r.readPart(ctx, jobID, &cur, want, func(a *sundialv1.ExecutionAttempt) bool {
			if len(out) == pageSize {
				return false
			}
			if a != nil {
				out = append(out, a)
			}
			return true
		})
		if err != nil {
			return nil, "", err
		}
		if full {
			break // the page filled with rows left in this bucket
		}
		if got < want { // this bucket is exhausted
			switch {
			case cur.Part > cur.Stop && cur.Legacy:
				cur.Part = int(month(cur.Part).prev())
			case cur.Part > cur.Stop:
				cur.Part = int(day(cur.Part).prev())
			case !cur.Legacy && r.legacy:
				// The new layout is done; the legacy months cover the same
				// span, holding what was written before the upgrade.
				cur.Legacy = true
				cur.Part = int(monthOf(day(cur.Start).time()))
				cur.Stop = int(monthOf(day(cur.Stop).time()))
			default:
				return out, "", nil
			}
			cur.Last = nil
		}
	}
	return out, cur.encode(), nil
}

// readPart reads up to limit rows of cur's bucket after cur.Last, offering
// each row to take (nil for a row that is hidden) and advancing cur past each
// row taken. It stops when take refuses a row (full = true) and returns how
// many rows the query returned.
func (r *Reader) readPart(ctx context.Context, jobID string, cur *cursor, limit int, take func(*sundialv1.ExecutionAttempt) bool) (got int, full bool, err error) {
	var st Statement
	switch k := cur.Last; {
	case cur.Legacy && k == nil:
		st = Statement{CQL: r.selectByJob, Values: []any{jobID, cur.Part, limit}}
	case cur.Legacy:
		st = Statement{CQL: r.selectByJobAfter, Values: []any{
			jobID, cur.Part, time.UnixMilli(k.ScheduledMs), k.ExecutionID, k.Attempt, k.Fence, limit,
		}}
	case k == nil:
		st = Statement{CQL: r.selectDay, Values: []any{bucketOf(jobID), cur.Part, jobID, limit}}
	default:
		st = Statement{CQL: r.selectDayAfter, Values: []any{
			bucketOf(jobID), cur.Part, jobID, time.UnixMilli(k.ScheduledMs), k.ExecutionID, k.Attempt, k.Fence, limit,
		}}
	}
	st.Idempotent = true
	it := r.s.Iter(ctx, st)
	var sr scanRow
	var bad error
	for it.Scan(sr.destFor(!cur.Legacy)...) {
		got++
		if full || bad != nil {
			continue // drain the peeked row, or the rest after a corrupt one
		}
		prev := cur.group()
		a := present(&sr, prev)
		if sr.err != nil {
			bad = sr.err
			continue
		}
		if !take(a) {
			full = true
			continue
		}
		cur.Last = &cursorKey{
			ScheduledMs: sr.scheduled.UnixMilli(), ExecutionID: sr.executionID,
			Attempt: sr.attempt, Fence: sr.fence, LiveFence: sr.group(prev).liveFence,
		}
	}
	if err := it.Close(); err != nil {
		return 0, false, fmt.Errorf("ledger: list job %s bucket %d: %w", jobID, cur.Part, err)
	}
	if bad != nil {
		return 0, false, fmt.Errorf("ledger: list job %s bucket %d: %w", jobID, cur.Part, bad)
	}
	return got, full, nil
}

// groupKey identifies an attempt and the highest fence seen for it.
type groupKey struct {
	executionID string
	attempt     int32
	liveFence   int64
}

// group is the attempt group of the row just scanned, given the previous
// row's group: rows of one attempt arrive highest fence first, so the first
// row of a group holds the live fence.
func (s *scanRow) group(prev *groupKey) *groupKey {
	if prev != nil && prev.executionID == s.executionID && prev.attempt == s.attempt {
		return prev
	}
	return &groupKey{executionID: s.executionID, attempt: s.attempt, liveFence: s.fence}
}

// present turns a scanned row into what readers see. The first row of an
// attempt is its live record. A later row of the same attempt was written
// under a lower fence: a lease holder that lost its lease, reported as
// FENCED with what it had recorded in reason; or, with fence 0, a record
// made before any lease (a staged state), hidden behind the leased one.
func present(s *scanRow, prev *groupKey) *sundialv1.ExecutionAttempt {
	if prev == nil || prev.executionID != s.executionID || prev.attempt != s.attempt {
		return s.attemptProto()
	}
	if s.fence == 0 {
		return nil
	}
	a := s.attemptProto()
	a.Reason = fmt.Sprintf("superseded by fence %d; recorded %s", prev.liveFence, a.GetStatus())
	a.Status = sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED
	return a
}

// cursor is ListByJob's position: the bucket being read (a day of the new
// layout, or a month of the legacy table once Legacy is set), the last one
// to read, the first day read (where the legacy walk starts), and the key of
// the last row returned in this bucket. It travels as an opaque token
// (base64 of JSON), bound to its job by a hash.
type cursor struct {
	V      int        `json:"v"`
	Job    uint64     `json:"j"`
	Part   int        `json:"p"`
	Stop   int        `json:"s"`
	Start  int        `json:"b,omitempty"`
	Legacy bool       `json:"o,omitempty"`
	Last   *cursorKey `json:"k,omitempty"`
}

type cursorKey struct {
	ScheduledMs int64  `json:"t"`
	ExecutionID string `json:"e"`
	Attempt     int32  `json:"a"`
	Fence       int64  `json:"f"`
	// LiveFence is the highest fence of the last row's attempt, so a page
	// that starts inside an attempt's group still marks superseded rows.
	LiveFence int64 `json:"l"`
}

const cursorVersion = 2

func (c *cursor) group() *groupKey {
	if c.Last == nil {
		return nil
	}
	return &groupKey{executionID: c.Last.ExecutionID, attempt: c.Last.Attempt, liveFence: c.Last.LiveFence}
}

func (c cursor) encode() string {
	c.V = cursorVersion
	b, _ := json.Marshal(c) // plain struct, cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(token, jobID string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return cursor{}, fmt.Errorf("%w: %v", ErrInvalidPageToken, err)
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil {
		return cursor{}, fmt.Errorf("%w: %v", ErrInvalidPageToken, err)
	}
	switch {
	case c.V != cursorVersion:
		return cursor{}, fmt.Errorf("%w: version %d", ErrInvalidPageToken, c.V)
	case c.Job != jobHash(jobID):
		return cursor{}, fmt.Errorf("%w: issued for another job", ErrInvalidPageToken)
	case c.Legacy && (!month(c.Part).valid() || !month(c.Stop).valid()),
		!c.Legacy && (!day(c.Part).valid() || !day(c.Stop).valid() || (c.Start != 0 && !day(c.Start).valid())),
		c.Part < c.Stop:
		return cursor{}, fmt.Errorf("%w: bad bucket range", ErrInvalidPageToken)
	}
	return c, nil
}

func (m month) valid() bool { return m/100 >= 1970 && m%100 >= 1 && m%100 <= 12 }

func jobHash(jobID string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(jobID))
	return h.Sum64()
}
