package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/quotas"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// MaxCreateJobs is the most items one CreateJobs call takes: enough that
// ten calls register 10,000 jobs, few enough that one call's transaction
// (its inserts, audit rows and the tenant's quota lock) stays short.
const MaxCreateJobs = 1000

// CreateJobs creates up to MaxCreateJobs jobs in one transaction, each as
// CreateJob would (prepareCreate, then firstSlot under the tenant's quota
// lock), counting every new job against the create quotas. Items refused
// before the transaction (bad fields, a reused key within the call) and in
// it (a schedule with no instant left, min_interval, max_jobs,
// create_rate, a key reused with another job) are reported per item, or
// refuse the call in ALL_OR_NOTHING mode.
func (s *JobService) CreateJobs(ctx context.Context, req *sundialv1.CreateJobsRequest) (*sundialv1.CreateJobsResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	items := req.GetItems()
	switch {
	case len(items) == 0:
		return nil, invalidf("items", "must hold at least one job")
	case len(items) > MaxCreateJobs:
		return nil, invalidf("items", "holds %d jobs; at most %d a call: send the rest in further calls", len(items), MaxCreateJobs)
	}
	mode := req.GetMode()
	if mode == sundialv1.CreateJobsMode_CREATE_JOBS_MODE_UNSPECIFIED {
		mode = sundialv1.CreateJobsMode_CREATE_JOBS_MODE_ALL_OR_NOTHING
	}
	if _, known := sundialv1.CreateJobsMode_name[int32(mode)]; !known {
		return nil, invalidf("mode", "unknown mode %d; use ALL_OR_NOTHING or PER_ITEM", mode)
	}
	allOrNothing := mode == sundialv1.CreateJobsMode_CREATE_JOBS_MODE_ALL_OR_NOTHING

	// Before the transaction: each item as CreateJob checks it, a Kafka
	// topic asked about once however many items name it.
	topics := map[string]error{}
	checkTopic := func(ctx context.Context, job *sundialv1.Job) error {
		t := job.GetTarget().GetKafka().GetTopic()
		if err, done := topics[t]; done {
			return err
		}
		err := s.checkTopic(ctx, job)
		topics[t] = err
		return err
	}
	outcomes := make([]store.Created, len(items))
	prepared := make([]preparedCreate, len(items))
	keys := make(map[string]int, len(items))
	var storeItems []store.CreateItem
	var toStore []int // item index of each storeItems entry
	var calendars []string
	for i, it := range items {
		p, err := s.prepareCreate(ctx, tenant, it, checkTopic)
		if err == nil && p.key != "" {
			if first, dup := keys[p.key]; dup {
				err = invalidf("idempotency_key", "repeats item %d's; the keys of one call must differ", first)
			}
			keys[p.key] = i
		}
		if err != nil {
			if !isItemError(err) {
				return nil, s.statusOf(ctx, "CreateJobs", err)
			}
			outcomes[i].Err = err
			continue
		}
		prepared[i] = p
		storeItems = append(storeItems, store.CreateItem{IdempotencyKey: p.key, RequestHash: p.hash})
		toStore = append(toStore, i)
		calendars = append(calendars, p.job.GetSchedule().GetCalendar())
	}
	if refused(outcomes) && allOrNothing {
		return nil, s.refuseAll(ctx, outcomes)
	}
	if len(storeItems) > 0 {
		if ctx, err = s.preloadCalendars(ctx, tenant, calendars...); err != nil {
			return nil, s.statusOf(ctx, "CreateJobs", err)
		}
		limits := s.quotas.For(tenant)
		opts := store.CreateManyOptions{
			IdempotencyTTL: s.idemTTL,
			Actor:          actorOf(ctx, tenant),
			Usage:          createUsage(limits),
			AllOrNothing:   allOrNothing,
		}
		stored, err := s.store.CreateMany(ctx, tenant, storeItems, opts, func(now time.Time, usage store.Usage, fresh []int) ([]store.Built, error) {
			built := make([]store.Built, len(fresh))
			accepted := 0 // the quotas count every job this call adds
			gaps := map[string]error{}
			for n, si := range fresh {
				if err := limits.CheckCreate(tenant, usage.Jobs+accepted, usage.CreatedRecently+accepted); err != nil {
					built[n].Err = err
					continue
				}
				job, err := s.firstSlot(ctx, tenant, limits, prepared[toStore[si]].job, now, gaps)
				if err != nil && !isItemError(err) {
					return nil, err
				}
				built[n] = store.Built{Job: job, Err: err}
				if err == nil {
					accepted++
				}
			}
			return built, nil
		})
		if err != nil && !errors.Is(err, store.ErrItemsRefused) {
			return nil, s.statusOf(ctx, "CreateJobs", err)
		}
		for si, c := range stored {
			outcomes[toStore[si]] = c
		}
		if err != nil {
			return nil, s.refuseAll(ctx, outcomes)
		}
	}
	resp := &sundialv1.CreateJobsResponse{Results: make([]*sundialv1.CreateJobsResult, len(items))}
	for i, c := range outcomes {
		r := &sundialv1.CreateJobsResult{Index: int32(i)}
		switch {
		case c.Err != nil:
			r.Error = s.itemError(ctx, c.Err)
			resp.Refused++
		case c.Existed:
			r.Job, r.Replayed = c.Job, true
			resp.Replayed++
		default:
			r.Job = c.Job
			resp.Created++
		}
		resp.Results[i] = r
	}
	s.metrics.idempotentReplays.Add(float64(resp.Replayed))
	s.logger.InfoContext(ctx, "jobs created", "tenant", tenant, "created", resp.Created, "replayed", resp.Replayed, "refused", resp.Refused)
	return resp, nil
}

// isItemError says whether err refuses one item (a status, a rejection, a
// quota or a reused key) rather than failing the call (the database).
func isItemError(err error) bool {
	var rej *rejection
	var over *quotas.ExceededError
	var reused *store.IdempotencyMismatchError
	var jerr *jobspec.Error
	if errors.As(err, &rej) || errors.As(err, &over) || errors.As(err, &reused) || errors.As(err, &jerr) {
		return true
	}
	st, ok := status.FromError(err)
	return ok && st.Code() != codes.Unknown
}

func refused(outcomes []store.Created) bool {
	for _, c := range outcomes {
		if c.Err != nil {
			return true
		}
	}
	return false
}

// itemError is the per-item form of the status CreateJob would answer.
func (s *JobService) itemError(ctx context.Context, err error) *sundialv1.CreateJobsItemError {
	st := status.Convert(s.statusOf(ctx, "CreateJobs", err))
	out := &sundialv1.CreateJobsItemError{Code: codeName(st.Code()), Message: st.Message()}
	for _, v := range fieldViolations(st) {
		out.Fields = append(out.Fields, &sundialv1.FieldError{Field: v.GetField(), Description: v.GetDescription()})
	}
	return out
}

func fieldViolations(st *status.Status) []*errdetails.BadRequest_FieldViolation {
	var out []*errdetails.BadRequest_FieldViolation
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			out = append(out, br.GetFieldViolations()...)
		}
	}
	return out
}

// codeName is the code's name as gRPC's documentation writes it
// (INVALID_ARGUMENT), which JSON clients see in google.rpc.Code too.
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// refuseAll is an ALL_OR_NOTHING call's error: the code of the gravest
// refusal (a bad field before a reused key before a quota), a message and
// a google.rpc.BadRequest naming every refused item's fields as
// "items[<index>].<field>" (just "items[<index>]" when the refusal names
// no field, as a quota's does).
func (s *JobService) refuseAll(ctx context.Context, outcomes []store.Created) error {
	rank := map[codes.Code]int{codes.InvalidArgument: 3, codes.AlreadyExists: 2, codes.ResourceExhausted: 1}
	code, best := codes.InvalidArgument, -1
	br := &errdetails.BadRequest{}
	var msgs []string
	for i, c := range outcomes {
		if c.Err == nil {
			continue
		}
		st := status.Convert(s.statusOf(ctx, "CreateJobs", c.Err))
		if r := rank[st.Code()]; r > best {
			code, best = st.Code(), r
		}
		vs := fieldViolations(st)
		if len(vs) == 0 {
			vs = []*errdetails.BadRequest_FieldViolation{{Description: st.Message()}}
		}
		for _, v := range vs {
			field := fmt.Sprintf("items[%d]", i)
			if v.GetField() != "" {
				field += "." + v.GetField()
			}
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: field, Description: v.GetDescription()})
			msgs = append(msgs, field+": "+v.GetDescription())
		}
	}
	var msg string
	if n := len(br.FieldViolations); n > 20 {
		msg = fmt.Sprintf("%d of %d items refused, nothing created: %s; and %d more (see the details)", countRefused(outcomes), len(outcomes), strings.Join(msgs[:20], "; "), n-20)
	} else {
		msg = fmt.Sprintf("%d of %d items refused, nothing created: %s", countRefused(outcomes), len(outcomes), strings.Join(msgs, "; "))
	}
	st := status.New(code, msg)
	if d, err := st.WithDetails(br); err == nil {
		st = d
	}
	return st.Err()
}

func countRefused(outcomes []store.Created) int {
	n := 0
	for _, c := range outcomes {
		if c.Err != nil {
			n++
		}
	}
	return n
}
