package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/calendar"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
	"github.com/sundialhq/sundial/pkg/postgres/calendarstore"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// CalendarReader reads a tenant's business calendars; *calendarstore.Store
// implements it. Another tenant's calendar is calendarstore.ErrNotFound.
type CalendarReader interface {
	Get(ctx context.Context, tenant, name string) (*sundialv1.Calendar, error)
}

// CalendarStore is the calendar storage CalendarService uses;
// *calendarstore.Store implements it.
type CalendarStore interface {
	CalendarReader
	Create(ctx context.Context, tenant string, c *sundialv1.Calendar, a calendarstore.Audit) (*sundialv1.Calendar, error)
	List(ctx context.Context, tenant, after string, limit int) ([]*sundialv1.Calendar, error)
	Update(ctx context.Context, tenant, name string, expectedVersion int64, a calendarstore.Audit, fn calendarstore.UpdateFunc) (*sundialv1.Calendar, int, error)
	Delete(ctx context.Context, tenant, name string, a calendarstore.Audit) error
	ListAudit(ctx context.Context, tenant, name string, before int64, limit int) ([]calendarstore.AuditEntry, error)
}

// jobCalendar is the calendar a schedule names, read as tenant's: a name
// the tenant has no calendar by (another tenant's included) is
// InvalidArgument on schedule.calendar. No calendar named: nil. A calendar
// preloaded into ctx (preloadCalendars) is taken from there.
func (s *JobService) jobCalendar(ctx context.Context, tenant string, spec *sundialv1.Schedule) (*sundialv1.Calendar, error) {
	name := spec.GetCalendar()
	if name == "" {
		return nil, nil
	}
	if s.calendars == nil {
		return nil, invalidf("schedule.calendar", "business calendars are not available on this server")
	}
	cal, ok := preloaded(ctx, tenant, name)
	if !ok {
		var err error
		cal, err = s.calendars.Get(ctx, tenant, name)
		if errors.Is(err, calendarstore.ErrNotFound) {
			cal, err = nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
	if cal == nil {
		return nil, invalidf("schedule.calendar", "no calendar %q: create it first (schedctl calendar create)", name)
	}
	return cal, nil
}

type calendarCacheKey struct{}

// calendarCache maps tenant and name to a calendar, nil when there is none.
type calendarCache map[[2]string]*sundialv1.Calendar

func preloaded(ctx context.Context, tenant, name string) (*sundialv1.Calendar, bool) {
	cache, _ := ctx.Value(calendarCacheKey{}).(calendarCache)
	cal, ok := cache[[2]string{tenant, name}]
	return cal, ok
}

// preloadCalendars reads the named calendars before a store transaction
// and returns a context carrying them, so the transaction's decision
// function does not take a second pool connection while it holds one
// (enough concurrent transactions doing that would wait on each other for
// the pool). A name the tenant has no calendar by is remembered as such.
func (s *JobService) preloadCalendars(ctx context.Context, tenant string, names ...string) (context.Context, error) {
	if s.calendars == nil {
		return ctx, nil
	}
	cache := calendarCache{}
	for _, name := range names {
		key := [2]string{tenant, name}
		if _, done := cache[key]; done || name == "" {
			continue
		}
		cal, err := s.calendars.Get(ctx, tenant, name)
		if err != nil && !errors.Is(err, calendarstore.ErrNotFound) {
			return ctx, err
		}
		cache[key] = cal
	}
	if len(cache) == 0 {
		return ctx, nil
	}
	return context.WithValue(ctx, calendarCacheKey{}, cache), nil
}

// preloadJobCalendars is preloadCalendars for a change to a stored job:
// the calendar the job names now and the one the change may name. A job
// it cannot read is left to the change itself to report.
func (s *JobService) preloadJobCalendars(ctx context.Context, rawID string, change *sundialv1.Job) (context.Context, error) {
	if s.calendars == nil {
		return ctx, nil
	}
	tenant, err := tenantOf(ctx)
	if err != nil {
		return ctx, nil
	}
	names := []string{change.GetSchedule().GetCalendar()}
	if id, err := jobID("id", rawID); err == nil {
		cur, err := s.store.Get(ctx, tenant, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return ctx, err
		}
		names = append(names, cur.GetSchedule().GetCalendar())
	}
	return s.preloadCalendars(ctx, tenant, names...)
}

// scheduleOf is the job's schedule with its calendar applied: what the
// prefetcher stages. Inside a store transaction a refusal aborts it.
func (s *JobService) scheduleOf(ctx context.Context, tenant string, job *sundialv1.Job, created time.Time) (schedule.Schedule, error) {
	sch, err := buildSchedule(job, created)
	if err != nil {
		return nil, err
	}
	cal, err := s.jobCalendar(ctx, tenant, job.GetSchedule())
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, rejectErr(err)
		}
		return nil, err
	}
	if cal == nil {
		return sch, nil
	}
	out, err := calendar.Apply(sch, job.GetSchedule(), cal)
	if err != nil {
		return nil, fmt.Errorf("server: apply calendar: %w", err)
	}
	return out, nil
}

// firstAfter is the job's first slot strictly after now, calendar
// applied; zero when none.
func (s *JobService) firstAfter(ctx context.Context, tenant string, job *sundialv1.Job, created, now time.Time) (time.Time, error) {
	sch, err := s.scheduleOf(ctx, tenant, job, created)
	if err != nil {
		return time.Time{}, err
	}
	return sch.Next(now), nil
}

// maxAdjustments bounds PreviewSchedule's list of calendar adjustments
// and exclusion notes.
const maxAdjustments = 1000

// previewAdjustments lists what the calendar and the exclusions did to the
// schedule's instants in (from, through] (schedule.Notes).
func previewAdjustments(sch schedule.Schedule, from, through time.Time) []*sundialv1.CalendarAdjustment {
	var out []*sundialv1.CalendarAdjustment
	for _, a := range schedule.Notes(sch, from, through, maxAdjustments) {
		adj := &sundialv1.CalendarAdjustment{Time: timestamppb.New(a.From), Reason: a.Reason}
		if !a.To.IsZero() {
			adj.MovedTo = timestamppb.New(a.To)
		}
		out = append(out, adj)
	}
	return out
}

// CalendarConfig is what a CalendarService needs.
type CalendarConfig struct {
	Store   CalendarStore
	Logger  *slog.Logger
	Metrics *Metrics
}

// CalendarService implements sundial.v1.CalendarService: each tenant's
// business calendars.
type CalendarService struct {
	sundialv1.UnimplementedCalendarServiceServer

	store   CalendarStore
	logger  *slog.Logger
	metrics *Metrics
}

// NewCalendarService checks cfg and returns the service.
func NewCalendarService(cfg CalendarConfig) (*CalendarService, error) {
	if cfg.Store == nil {
		return nil, errors.New("server: calendar Store is required")
	}
	s := &CalendarService{store: cfg.Store, logger: cfg.Logger, metrics: cfg.Metrics}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(nil)
	}
	return s, nil
}

func (s *CalendarService) statusOf(ctx context.Context, op string, err error) error {
	var inUse *calendarstore.InUseError
	switch {
	case errors.Is(err, calendarstore.ErrNotFound):
		return status.Error(codes.NotFound, "calendar not found")
	case errors.Is(err, calendarstore.ErrExists):
		return status.Error(codes.AlreadyExists, "a calendar of that name exists; update it, or import with replace")
	case errors.Is(err, calendarstore.ErrVersion):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, calendarstore.ErrTooMany):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.As(err, &inUse):
		return status.Errorf(codes.FailedPrecondition, "calendar is used by %d job(s) that are not deleted (e.g. %v): change their schedule.calendar first", inUse.Count, inUse.Jobs)
	}
	var jerr *jobspec.Error
	if errors.As(err, &jerr) {
		return invalid(jerr.Violations...)
	}
	return statusOf(ctx, s.logger, s.metrics, op, err)
}

// clean keeps only what a client may set.
func clean(c *sundialv1.Calendar) *sundialv1.Calendar {
	return &sundialv1.Calendar{Name: c.GetName(), Description: c.GetDescription(), Holidays: c.GetHolidays(), Weekend: c.GetWeekend()}
}

// CreateCalendar stores a new calendar of the caller's tenant.
func (s *CalendarService) CreateCalendar(ctx context.Context, req *sundialv1.CreateCalendarRequest) (*sundialv1.CreateCalendarResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	c := clean(req.GetCalendar())
	if req.GetCalendar() == nil {
		return nil, invalidf("calendar", "is required")
	}
	if err := calendar.Validate("calendar", c); err != nil {
		return nil, s.statusOf(ctx, "CreateCalendar", err)
	}
	actor := actorOf(ctx, tenant)
	out, err := s.store.Create(ctx, tenant, c, calendarstore.Audit{Actor: actor})
	if err != nil {
		return nil, s.statusOf(ctx, "CreateCalendar", err)
	}
	s.logger.InfoContext(ctx, "calendar created", "tenant", tenant, "calendar", out.GetName(), "holidays", len(out.GetHolidays()), "actor", actor)
	return &sundialv1.CreateCalendarResponse{Calendar: out}, nil
}

func calendarName(field, name string) error {
	if name == "" {
		return invalidf(field, "is required")
	}
	if !jobspec.ValidCalendarName(name) {
		return invalidf(field, "%q is not a calendar name: 1-63 lowercase letters, digits, '-' or '_', starting with a letter or digit", name)
	}
	return nil
}

// GetCalendar returns one of the tenant's calendars.
func (s *CalendarService) GetCalendar(ctx context.Context, req *sundialv1.GetCalendarRequest) (*sundialv1.GetCalendarResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := calendarName("name", req.GetName()); err != nil {
		return nil, err
	}
	c, err := s.store.Get(ctx, tenant, req.GetName())
	if err != nil {
		return nil, s.statusOf(ctx, "GetCalendar", err)
	}
	return &sundialv1.GetCalendarResponse{Calendar: c}, nil
}

// ListCalendars pages through the tenant's calendars by name. A page
// token is the last name of the previous page, encoded.
func (s *CalendarService) ListCalendars(ctx context.Context, req *sundialv1.ListCalendarsRequest) (*sundialv1.ListCalendarsResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	var after string
	if tok := req.GetPageToken(); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || !jobspec.ValidCalendarName(string(b)) {
			return nil, invalidf("page_token", "is not a token this server issued")
		}
		after = string(b)
	}
	cals, err := s.store.List(ctx, tenant, after, size+1)
	if err != nil {
		return nil, s.statusOf(ctx, "ListCalendars", err)
	}
	resp := &sundialv1.ListCalendarsResponse{Calendars: cals}
	if len(cals) > size {
		resp.Calendars = cals[:size]
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(cals[size-1].GetName()))
	}
	return resp, nil
}

// UpdateCalendar replaces a calendar's description, holidays and weekend.
func (s *CalendarService) UpdateCalendar(ctx context.Context, req *sundialv1.UpdateCalendarRequest) (*sundialv1.UpdateCalendarResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetCalendar() == nil {
		return nil, invalidf("calendar", "is required")
	}
	c := clean(req.GetCalendar())
	if err := calendar.Validate("calendar", c); err != nil {
		return nil, s.statusOf(ctx, "UpdateCalendar", err)
	}
	if req.GetExpectedVersion() < 0 {
		return nil, invalidf("expected_version", "must not be negative")
	}
	actor := actorOf(ctx, tenant)
	out, pulled, err := s.store.Update(ctx, tenant, c.GetName(), req.GetExpectedVersion(), calendarstore.Audit{Actor: actor}, func(*sundialv1.Calendar) (*sundialv1.Calendar, error) {
		return c, nil
	})
	if err != nil {
		return nil, s.statusOf(ctx, "UpdateCalendar", err)
	}
	s.logger.InfoContext(ctx, "calendar updated", "tenant", tenant, "calendar", out.GetName(), "version", out.GetVersion(), "jobs_rescheduled", pulled, "actor", actor)
	return &sundialv1.UpdateCalendarResponse{Calendar: out}, nil
}

// DeleteCalendar removes a calendar no job uses.
func (s *CalendarService) DeleteCalendar(ctx context.Context, req *sundialv1.DeleteCalendarRequest) (*sundialv1.DeleteCalendarResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := calendarName("name", req.GetName()); err != nil {
		return nil, err
	}
	actor := actorOf(ctx, tenant)
	if err := s.store.Delete(ctx, tenant, req.GetName(), calendarstore.Audit{Actor: actor}); err != nil {
		return nil, s.statusOf(ctx, "DeleteCalendar", err)
	}
	s.logger.InfoContext(ctx, "calendar deleted", "tenant", tenant, "calendar", req.GetName(), "actor", actor)
	return &sundialv1.DeleteCalendarResponse{}, nil
}

// ImportCalendar creates a calendar, or replaces one's holidays, from an
// iCalendar file.
func (s *CalendarService) ImportCalendar(ctx context.Context, req *sundialv1.ImportCalendarRequest) (*sundialv1.ImportCalendarResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := calendarName("name", req.GetName()); err != nil {
		return nil, err
	}
	hols, skipped, err := calendar.ParseICS(req.GetIcs())
	if err != nil {
		return nil, invalidf("ics", "%v", err)
	}
	c := &sundialv1.Calendar{Name: req.GetName(), Description: req.GetDescription(), Holidays: hols, Weekend: req.GetWeekend()}
	var out *sundialv1.Calendar
	actor := actorOf(ctx, tenant)
	audit := calendarstore.Audit{Actor: actor, Detail: map[string]any{"import": true, "skipped_events": len(skipped)}}
	if req.GetReplace() {
		out, _, err = s.store.Update(ctx, tenant, req.GetName(), 0, audit, func(cur *sundialv1.Calendar) (*sundialv1.Calendar, error) {
			next := proto.Clone(clean(cur)).(*sundialv1.Calendar)
			next.Holidays = hols
			if req.GetDescription() != "" {
				next.Description = req.GetDescription()
			}
			if req.GetWeekend() != nil {
				next.Weekend = req.GetWeekend()
			}
			return next, calendar.Validate("calendar", next)
		})
	} else {
		if err := calendar.Validate("calendar", c); err != nil {
			return nil, s.statusOf(ctx, "ImportCalendar", err)
		}
		out, err = s.store.Create(ctx, tenant, c, audit)
	}
	if err != nil {
		return nil, s.statusOf(ctx, "ImportCalendar", err)
	}
	s.logger.InfoContext(ctx, "calendar imported", "tenant", tenant, "calendar", out.GetName(), "holidays", len(hols), "skipped_events", len(skipped), "actor", actor)
	return &sundialv1.ImportCalendarResponse{Calendar: out, Skipped: skipped}, nil
}

// ListCalendarAudit pages through the tenant's calendar trail (one
// calendar's, when named), newest first.
func (s *CalendarService) ListCalendarAudit(ctx context.Context, req *sundialv1.ListCalendarAuditRequest) (*sundialv1.ListCalendarAuditResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	name := req.GetName()
	if name != "" {
		if err := calendarName("name", name); err != nil {
			return nil, err
		}
	}
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	// The token's scope is the tenant and calendar ("" for all) it pages
	// through.
	scope := map[string]string{"t": tenant, "c": name}
	c, err := auditCursor(req.GetPageToken(), scope, false, "another tenant or calendar")
	if err != nil {
		return nil, err
	}
	entries, err := s.store.ListAudit(ctx, tenant, name, c.Seq, size+1)
	if err != nil {
		return nil, s.statusOf(ctx, "ListCalendarAudit", err)
	}
	resp := &sundialv1.ListCalendarAuditResponse{}
	entries, resp.NextPageToken = auditPage(entries, size, func(e calendarstore.AuditEntry) audittrail.Cursor {
		return audittrail.Cursor{Seq: e.Seq, Scope: scope}
	})
	for _, e := range entries {
		resp.Entries = append(resp.Entries, &sundialv1.CalendarAuditEntry{Calendar: e.Calendar, Actor: e.Actor, Action: e.Action,
			Version: e.Version, Time: timestamppb.New(e.At), Detail: e.Detail})
	}
	return resp, nil
}
