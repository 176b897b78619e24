package ledger

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/gocql/gocql"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// MaxTextBytes caps the free-text columns (error, response excerpt, reason):
// a ledger row is history, not a log store, and a wide cell slows every read
// of its partition. Longer values are cut at a UTF-8 boundary.
const MaxTextBytes = 2048

// ErrInvalidAttempt is wrapped by Record when the attempt lacks a field the
// ledger keys on; the message names the field.
var ErrInvalidAttempt = errors.New("ledger: invalid attempt")

// month is a partition bucket: yyyymm of an instant in UTC.
type month int

func monthOf(t time.Time) month {
	t = t.UTC()
	return month(t.Year()*100 + int(t.Month()))
}

// day is the new layout's time bucket: yyyymmdd of an instant in UTC.
type day int

func dayOf(t time.Time) day {
	t = t.UTC()
	return day(t.Year()*10000 + int(t.Month())*100 + t.Day())
}

// hour is TableByTenant's time bucket: yyyymmddhh of an instant in UTC.
type hour int

func hourOf(t time.Time) hour {
	t = t.UTC()
	return hour(int(dayOf(t))*100 + t.Hour())
}

func (h hour) time() time.Time {
	return day(int(h) / 100).time().Add(time.Duration(int(h)%100) * time.Hour)
}

func (h hour) prev() hour { return hourOf(h.time().Add(-time.Hour)) }

func (h hour) valid() bool { return day(int(h)/100).valid() && int(h)%100 < 24 }

func (d day) time() time.Time {
	return time.Date(int(d)/10000, time.Month(int(d)/100%100), int(d)%100, 0, 0, 0, 0, time.UTC)
}

func (d day) prev() day { return dayOf(d.time().AddDate(0, 0, -1)) }

func (d day) valid() bool {
	return d/10000 >= 1970 && d.time().Format("20060102") == fmt.Sprintf("%08d", int(d))
}

// Buckets is B, the number of partitions a day of the ledger is spread
// over: a record's partition is (bucketOf(job_id), day of its slot), and an
// index entry's is (bucketOf(execution_id), day it was written). Changing B
// moves every key, so it is a constant of the layout (see DESIGN.md for the
// measurement that chose it).
const Buckets = 64

// bucketOf is a stable hash of id mod Buckets (FNV-1a, the same in every
// process and release).
func bucketOf(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % Buckets)
}

// PartitionKey names the ledger partition a record goes to: records with
// the same key are written together in one single-partition batch. Callers
// that collect records (the worker's recorder) group by it so their groups
// map onto few partitions.
func PartitionKey(a *sundialv1.ExecutionAttempt) uint64 {
	d := 0
	if ts := a.GetScheduledTime(); ts != nil {
		d = int(dayOf(ts.AsTime()))
	}
	return uint64(d)*Buckets + uint64(bucketOf(a.GetJobId()))
}

func (m month) prev() month {
	y, mo := int(m)/100, int(m)%100
	if mo == 1 {
		return month((y-1)*100 + 12)
	}
	return month(y*100 + mo - 1)
}

// statusRank orders an attempt's statuses as one worker moves through them,
// so a later transition always carries a higher write timestamp than an
// earlier one, whatever the wall clock did in between.
func statusRank(s sundialv1.ExecutionStatus) int64 {
	switch s {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_SCHEDULED:
		return 1
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_QUEUED:
		return 2
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING:
		return 3
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED:
		return 4
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED, sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
		return 5
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED:
		return 6
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED:
		return 7
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD:
		return 8
	default:
		return 0
	}
}

// row is one ledger row in column order.
type row struct {
	jobID       string
	month       month
	bucket      int
	day         day
	scheduled   time.Time
	executionID string
	attempt     int32
	fence       int64
	tenant      string
	status      string
	fire        *time.Time
	started     *time.Time
	finished    *time.Time
	latenessNs  *int64
	durationNs  *int64
	worker      string
	httpStatus  int32
	errText     string
	excerpt     string
	catchUp     bool
	jobVersion  int64
	reason      string
}

func rowFrom(a *sundialv1.ExecutionAttempt) (row, error) {
	switch {
	case a == nil:
		return row{}, fmt.Errorf("%w: nil", ErrInvalidAttempt)
	case a.GetExecutionId() == "":
		return row{}, fmt.Errorf("%w: execution_id is empty", ErrInvalidAttempt)
	case a.GetJobId() == "":
		return row{}, fmt.Errorf("%w: job_id is empty", ErrInvalidAttempt)
	case a.GetAttempt() < 1:
		return row{}, fmt.Errorf("%w: attempt must be >= 1, got %d", ErrInvalidAttempt, a.GetAttempt())
	case a.GetScheduledTime() == nil:
		return row{}, fmt.Errorf("%w: scheduled_time is missing", ErrInvalidAttempt)
	case a.GetStatus() == sundialv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED:
		return row{}, fmt.Errorf("%w: status is unspecified", ErrInvalidAttempt)
	case a.GetFenceToken() < 0:
		return row{}, fmt.Errorf("%w: fence_token must be >= 0, got %d", ErrInvalidAttempt, a.GetFenceToken())
	}
	sched := a.GetScheduledTime().AsTime()
	return row{
		jobID:       a.GetJobId(),
		month:       monthOf(sched),
		bucket:      bucketOf(a.GetJobId()),
		day:         dayOf(sched),
		scheduled:   sched,
		executionID: a.GetExecutionId(),
		attempt:     a.GetAttempt(),
		fence:       a.GetFenceToken(),
		tenant:      a.GetTenant(),
		status:      firing.ExecutionStatusCQL(a.GetStatus()),
		fire:        optTime(a.GetFireTime()),
		started:     optTime(a.GetStartedTime()),
		finished:    optTime(a.GetFinishedTime()),
		latenessNs:  optDuration(a.GetLateness()),
		durationNs:  optDuration(a.GetDuration()),
		worker:      a.GetWorker(),
		httpStatus:  a.GetHttpStatus(),
		errText:     clip(a.GetError()),
		excerpt:     clip(a.GetResponseExcerpt()),
		catchUp:     a.GetCatchUp(),
		jobVersion:  a.GetJobVersion(),
		reason:      clip(a.GetReason()),
	}, nil
}

// writeTimestamp is the CQL write timestamp (µs) of every cell of this
// record. It is the attempt's anchor instant — fire time, else the slot —
// which the envelope fixes for the whole attempt, plus the status rank. One
// worker's records of one attempt share the anchor, so they order by rank
// (RUNNING < SUCCEEDED) even if its clock steps back; records under another
// fence are other rows (the fence is in the key), so they never compete.
// Being close to real time keeps time-window compaction's windows honest.
func (r row) writeTimestamp(status sundialv1.ExecutionStatus) int64 {
	anchor := r.scheduled
	if r.fire != nil {
		anchor = *r.fire
	}
	return anchor.UnixMicro() + statusRank(status)
}

// values binds the row in the legacy tables' column order (columns).
func (r row) values() []any {
	return append([]any{r.jobID, int(r.month)}, r.tail()...)
}

// attemptValues binds the row in TableAttempts' column order
// (attemptColumns); the USING clause's values follow (Writer.using).
func (r row) attemptValues() []any {
	return append([]any{r.bucket, int(r.day), r.jobID}, r.tail()...)
}

// tenantValues binds the row in TableByTenant's column order
// (tenantColumns); the USING clause's values follow.
func (r row) tenantValues() []any {
	return append([]any{int(hourOf(r.scheduled)), r.jobID}, r.tail()...)
}

// tail binds the columns after job_id (and month) in column order. Unset
// fields are sent as "unset", not null: a null is a tombstone, and an
// attempt written twice (RUNNING, then its outcome) would otherwise bury
// its earlier fields under them.
func (r row) tail() []any {
	return []any{
		r.scheduled, r.executionID, r.attempt, r.fence,
		unsetIfZero(r.tenant), r.status,
		unsetIfNil(r.fire), unsetIfNil(r.started), unsetIfNil(r.finished),
		unsetIfNil(r.latenessNs), unsetIfNil(r.durationNs),
		unsetIfZero(r.worker), unsetIfZero(r.httpStatus),
		unsetIfZero(r.errText), unsetIfZero(r.excerpt), unsetIfZero(r.catchUp),
		unsetIfZero(r.jobVersion), unsetIfZero(r.reason),
	}
}

// scanRow holds the scan destinations of one row; pointers to pointers let
// the driver report null as nil.
type scanRow struct {
	jobID       string
	scheduled   time.Time
	executionID string
	attempt     int32
	fence       int64
	tenant      *string
	status      *string
	fire        *time.Time
	started     *time.Time
	finished    *time.Time
	latenessNs  *int64
	durationNs  *int64
	worker      *string
	httpStatus  *int32
	errText     *string
	excerpt     *string
	catchUp     *bool
	jobVersion  *int64
	reason      *string
	// parts are the packed records of a grouped table's row, by status
	// rank; empty for a row written as columns.
	parts map[int][]byte
	// err is why a packed record could not be read (a corrupt cell).
	err error
}

// dest is where a legacy table's row (readColumns) scans.
func (s *scanRow) dest() []any {
	s.err = nil
	return []any{
		&s.jobID, &s.scheduled, &s.executionID, &s.attempt, &s.fence,
		&s.tenant, &s.status, &s.fire, &s.started, &s.finished, &s.latenessNs, &s.durationNs,
		&s.worker, &s.httpStatus, &s.errText, &s.excerpt, &s.catchUp, &s.jobVersion, &s.reason,
	}
}

// destFor is groupedDest for a grouped table's row, dest for a legacy one.
func (s *scanRow) destFor(grouped bool) []any {
	if grouped {
		return s.groupedDest()
	}
	return s.dest()
}

// groupedDest is where a grouped table's row (groupedReadColumns) scans.
func (s *scanRow) groupedDest() []any {
	clear(s.parts)
	return append(s.dest(), &s.parts)
}

func (s *scanRow) attemptProto() *sundialv1.ExecutionAttempt {
	a := &sundialv1.ExecutionAttempt{
		ExecutionId:     s.executionID,
		JobId:           s.jobID,
		Tenant:          deref(s.tenant),
		Attempt:         s.attempt,
		Status:          firing.ExecutionStatusFromCQL(deref(s.status)),
		ScheduledTime:   timestamppb.New(s.scheduled),
		FenceToken:      s.fence,
		Worker:          deref(s.worker),
		HttpStatus:      deref(s.httpStatus),
		Error:           deref(s.errText),
		ResponseExcerpt: deref(s.excerpt),
		CatchUp:         deref(s.catchUp),
		JobVersion:      deref(s.jobVersion),
		Reason:          deref(s.reason),
	}
	if s.fire != nil {
		a.FireTime = timestamppb.New(*s.fire)
	}
	if s.started != nil {
		a.StartedTime = timestamppb.New(*s.started)
	}
	if s.finished != nil {
		a.FinishedTime = timestamppb.New(*s.finished)
	}
	if s.latenessNs != nil {
		a.Lateness = durationpb.New(time.Duration(*s.latenessNs))
	}
	if s.durationNs != nil {
		a.Duration = durationpb.New(time.Duration(*s.durationNs))
	}
	if len(s.parts) > 0 {
		s.err = mergeParts(a, s.parts)
	}
	return a
}

// packRecord is the record's packed cell: the attempt's fields outside
// the row's key and status (which are columns), text clipped as the
// columns clip it, as a protobuf ExecutionAttempt. Unset fields are absent,
// so merging (mergeParts) keeps what an earlier record of the attempt
// wrote, as the column layout's unset values did.
func packRecord(a *sundialv1.ExecutionAttempt) ([]byte, error) {
	return proto.Marshal(&sundialv1.ExecutionAttempt{
		Tenant:          a.GetTenant(),
		FireTime:        a.GetFireTime(),
		StartedTime:     a.GetStartedTime(),
		FinishedTime:    a.GetFinishedTime(),
		Lateness:        a.GetLateness(),
		Duration:        a.GetDuration(),
		Worker:          a.GetWorker(),
		HttpStatus:      a.GetHttpStatus(),
		Error:           clip(a.GetError()),
		ResponseExcerpt: clip(a.GetResponseExcerpt()),
		CatchUp:         a.GetCatchUp(),
		JobVersion:      a.GetJobVersion(),
		Reason:          clip(a.GetReason()),
	})
}

// mergeParts lays a row's packed records over what its columns held
// (written before records were packed), lowest status rank first, so each
// later transition's fields replace the earlier ones it sets and keep
// those it does not. The status is the column's, written with every
// record: the latest by write timestamp.
func mergeParts(a *sundialv1.ExecutionAttempt, parts map[int][]byte) error {
	ranks := make([]int, 0, len(parts))
	for r := range parts {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	into := a.ProtoReflect()
	for _, r := range ranks {
		var p sundialv1.ExecutionAttempt
		if err := proto.Unmarshal(parts[r], &p); err != nil {
			return fmt.Errorf("ledger: execution %s attempt %d: packed record of rank %d: %w", a.GetExecutionId(), a.GetAttempt(), r, err)
		}
		p.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			into.Set(fd, v)
			return true
		})
	}
	return nil
}

func optTime(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}

func optDuration(d *durationpb.Duration) *int64 {
	if d == nil {
		return nil
	}
	n := int64(d.AsDuration())
	return &n
}

func unsetIfNil[T any](p *T) any {
	if p == nil {
		return gocql.UnsetValue
	}
	return *p
}

func unsetIfZero[T comparable](v T) any {
	var zero T
	if v == zero {
		return gocql.UnsetValue
	}
	return v
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// clip cuts s to at most MaxTextBytes without splitting a UTF-8 sequence.
func clip(s string) string {
	if len(s) <= MaxTextBytes {
		return s
	}
	cut := MaxTextBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// BucketOf is the bucket of a job id (its records' partition, with the
// slot's day) or of an execution id (its index entry's, with the write's
// day): for tools and tests that read the tables directly.
func BucketOf(id string) int { return bucketOf(id) }
