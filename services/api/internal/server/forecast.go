package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/domain/calendar"
	"github.com/sundialhq/sundial/pkg/domain/forecast"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// ForecastStore is what the ForecastService reads; *store.Store
// implements it.
type ForecastStore interface {
	ForEachForecastCount(ctx context.Context, tenant string, priority sundialv1.Priority, fn func(store.ForecastCount) error) error
	JobNames(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]string, error)
	LoadCalendar(ctx context.Context, tenant, name string) (*sundialv1.Calendar, error)
}

// Forecast defaults and limits.
const (
	DefaultForecastWindow = 24 * time.Hour
	maxForecastHerds      = 100
)

// ForecastConfig is what a ForecastService needs.
type ForecastConfig struct {
	Store  ForecastStore
	Logger *slog.Logger
	// Clock says when "now" is; nil: the real clock.
	Clock clock.Clock
}

// ForecastService implements sundial.v1.ForecastService.
type ForecastService struct {
	sundialv1.UnimplementedForecastServiceServer
	cfg ForecastConfig
}

// NewForecastService checks cfg and returns the service.
func NewForecastService(cfg ForecastConfig) (*ForecastService, error) {
	if cfg.Store == nil {
		return nil, errors.New("server: ForecastConfig.Store is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	return &ForecastService{cfg: cfg}, nil
}

// GetForecast reads the active jobs the caller may see and forecasts their
// firings (pkg/domain/forecast).
func (s *ForecastService) GetForecast(ctx context.Context, req *sundialv1.GetForecastRequest) (*sundialv1.GetForecastResponse, error) {
	tenant, err := forecastTenant(ctx, req.GetTenant())
	if err != nil {
		return nil, err
	}
	opts, err := forecastOptions(req, s.cfg.Clock.Now())
	if err != nil {
		return nil, err
	}
	b, err := forecast.New(opts)
	if err != nil {
		return nil, invalidf("window", "%v", err)
	}
	cals := map[[2]string]*schedule.Calendar{}
	lookup := func(tenant, name string) (*schedule.Calendar, error) {
		key := [2]string{tenant, name}
		if c, ok := cals[key]; ok {
			return c, nil
		}
		stored, err := s.cfg.Store.LoadCalendar(ctx, tenant, name)
		if err != nil {
			return nil, err
		}
		c, err := calendar.Engine(stored)
		if err != nil {
			return nil, err
		}
		cals[key] = c
		return c, nil
	}
	var undecodable int64
	// The counts are per (tenant, priority, jitter, schedule): the
	// database keeps them from every write of jobs (migration 00027), so
	// this reads one row per distinct schedule, not one per job, and the
	// decoder decodes each distinct schedule once.
	dec := forecast.NewDecoder(lookup)
	err = s.cfg.Store.ForEachForecastCount(ctx, tenant, req.GetPriority(), func(c store.ForecastCount) error {
		fc := forecast.Count{Tenant: c.Tenant, Priority: c.Priority, Schedule: c.Schedule, Jitter: c.Jitter, Jobs: int(c.Jobs)}
		if c.Anchor != nil {
			fc.Anchor = *c.Anchor
		}
		if c.JobID != nil {
			fc.JobID = c.JobID.String()
		}
		for _, id := range c.Sample {
			fc.Sample = append(fc.Sample, id.String())
		}
		j, sample, err := dec.Count(fc)
		if err != nil {
			undecodable += c.Jobs
			return nil
		}
		b.AddN(j, fc.Jobs, sample)
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		s.cfg.Logger.ErrorContext(ctx, "forecast: read schedule counts", slog.Any("error", err))
		return nil, status.Error(codes.Unavailable, "forecast: reading the jobs failed; try again")
	}
	f := b.Forecast()
	if err := s.nameSample(ctx, f); err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		s.cfg.Logger.ErrorContext(ctx, "forecast: read herd job names", slog.Any("error", err))
		return nil, status.Error(codes.Unavailable, "forecast: reading the jobs failed; try again")
	}
	resp := forecastResponse(f)
	resp.FailedJobs += undecodable
	return resp, nil
}

// nameSample fills in the names of the jobs listed in f's herds (the
// counts carry their ids only), with one read.
func (s *ForecastService) nameSample(ctx context.Context, f *forecast.Forecast) error {
	var ids []uuid.UUID
	for _, h := range f.Herds {
		for _, hs := range h.Schedules {
			for _, j := range hs.Sample {
				if id, err := uuid.Parse(j.ID); err == nil {
					ids = append(ids, id)
				}
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	names, err := s.cfg.Store.JobNames(ctx, ids)
	if err != nil {
		return err
	}
	for hi := range f.Herds {
		for si := range f.Herds[hi].Schedules {
			sample := f.Herds[hi].Schedules[si].Sample
			for ji := range sample {
				if id, err := uuid.Parse(sample[ji].ID); err == nil {
					sample[ji].Name = names[id]
				}
			}
		}
	}
	return nil
}

// forecastTenant is the tenant a forecast reads: a tenant's token its own
// (the field may name only that); a platform operator the tenant the field
// or the sundial-tenant header names, or every tenant's.
func forecastTenant(ctx context.Context, named string) (string, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return "", err
	}
	header, operator := auth.OperatorTenant(ctx)
	if !operator {
		if named != "" && named != tenant {
			return "", status.Errorf(codes.PermissionDenied, "tenant: a tenant's token forecasts its own jobs only (%s), not %s", tenant, named)
		}
		return tenant, nil
	}
	switch {
	case named != "" && !auth.ValidName(named, false):
		return "", invalidf("tenant", "%q is not a tenant name", named)
	case named != "":
		return named, nil
	case header != "":
		return header, nil
	}
	return store.AllTenants, nil
}

// forecastOptions checks the request; every error names its field.
func forecastOptions(req *sundialv1.GetForecastRequest, now time.Time) (forecast.Options, error) {
	o := forecast.Options{From: now, Window: DefaultForecastWindow}
	if w := req.GetWindow(); w != nil {
		if err := w.CheckValid(); err != nil {
			return o, invalidf("window", "%v", err)
		}
		o.Window = w.AsDuration()
		if o.Window < time.Minute || o.Window > forecast.MaxWindow || o.Window%time.Minute != 0 {
			return o, invalidf("window", "must be whole minutes from 1m to %s (168h), got %s", forecast.MaxWindow, o.Window)
		}
	}
	if p := req.GetPriority(); p != sundialv1.Priority_PRIORITY_UNSPECIFIED {
		if _, ok := sundialv1.Priority_name[int32(p)]; !ok {
			return o, invalidf("priority", "unknown value %d", p)
		}
	}
	if n := req.GetHerdThreshold(); n < 0 {
		return o, invalidf("herd_threshold", "must not be negative, got %d", n)
	}
	if n := req.GetMaxHerds(); n < 0 || n > maxForecastHerds {
		return o, invalidf("max_herds", "must be from 0 (the default, %d) to %d, got %d", forecast.DefaultMaxHerds, maxForecastHerds, n)
	}
	o.HerdThreshold, o.MaxHerds = int(req.GetHerdThreshold()), int(req.GetMaxHerds())
	return o, nil
}

func forecastResponse(f *forecast.Forecast) *sundialv1.GetForecastResponse {
	r := &sundialv1.GetForecastResponse{
		From: timestamppb.New(f.From), Window: durationpb.New(f.Window),
		Jobs: int64(f.Jobs), Schedules: int64(f.Schedules), Firings: f.Firings,
		Minutes: f.Minutes, Partial: f.Partial,
		SkippedJobs: int64(f.SkippedJobs), FailedJobs: int64(f.Failed),
	}
	series := func(s forecast.Series, withMinutes bool) *sundialv1.ForecastSeries {
		out := &sundialv1.ForecastSeries{Name: s.Name, Total: s.Total, Peak: s.Peak, PeakTime: timestamppb.New(s.PeakAt)}
		if withMinutes {
			out.Minutes = s.Minutes
		}
		return out
	}
	for _, s := range f.ByPriority {
		r.ByPriority = append(r.ByPriority, series(s, true))
	}
	for _, s := range f.ByTenant {
		r.ByTenant = append(r.ByTenant, series(s, false))
	}
	for _, p := range f.Peaks {
		r.Peaks = append(r.Peaks, &sundialv1.ForecastPeak{Time: timestamppb.New(p.At), Firings: p.Firings, Due: p.Due[:], Expected: p.Expected[:]})
	}
	for _, h := range f.Herds {
		ph := &sundialv1.ForecastHerd{Time: timestamppb.New(h.At), Firings: h.Firings, NoJitter: h.NoJitter, ExpectedPeak: h.ExpectedPeak, MoreSchedules: int32(h.MoreSchedules)}
		for _, s := range h.Schedules {
			ps := &sundialv1.ForecastHerdSchedule{Expression: s.Expr, Timezone: s.Zone, Jobs: int64(s.Jobs), NoJitter: int64(s.NoJitter), SuggestedExpression: s.SuggestH, MoreJobs: int64(s.MoreJobs)}
			if s.SuggestJitter > 0 {
				ps.SuggestedJitter = durationpb.New(s.SuggestJitter)
			}
			for _, j := range s.Sample {
				ps.Sample = append(ps.Sample, &sundialv1.ForecastHerdJob{Id: j.ID, Tenant: j.Tenant, Name: j.Name, MaxJitter: durationpb.New(j.Jitter), Slot: j.Slot})
			}
			ph.Schedules = append(ph.Schedules, ps)
		}
		r.Herds = append(r.Herds, ph)
	}
	return r
}
