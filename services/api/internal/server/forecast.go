package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/auth"
	"github.com/sundialhq/sundial/pkg/calendar"
	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/forecast"
	"github.com/sundialhq/sundial/pkg/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// ForecastStore is what the ForecastService reads; *store.Store
// implements it.
type ForecastStore interface {
	ForEachActiveJob(ctx context.Context, tenant string, priority sundialv1.Priority, limit int, fn func(store.ForecastJob) error) (more bool, err error)
	LoadCalendar(ctx context.Context, tenant, name string) (*sundialv1.Calendar, error)
}

// Forecast defaults and limits.
const (
	DefaultForecastWindow = 24 * time.Hour
	// DefaultForecastMaxJobs caps the jobs one forecast reads. The
	// arithmetic is cheap (pkg/forecast: 10 M jobs in about a second once
	// read); reading and decoding each job's spec from Postgres is what
	// costs, a few microseconds a job, so a forecast stays within seconds.
	DefaultForecastMaxJobs = 1_000_000
	maxForecastHerds       = 100
)

// ForecastConfig is what a ForecastService needs.
type ForecastConfig struct {
	Store  ForecastStore
	Logger *slog.Logger
	// Clock says when "now" is; nil: the real clock.
	Clock clock.Clock
	// MaxJobs caps the jobs one forecast reads (DefaultForecastMaxJobs
	// when 0); past it the forecast is partial and says so.
	MaxJobs int
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
	if cfg.MaxJobs <= 0 {
		cfg.MaxJobs = DefaultForecastMaxJobs
	}
	return &ForecastService{cfg: cfg}, nil
}

// GetForecast reads the active jobs the caller may see and forecasts their
// firings (pkg/forecast).
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
	var undecodable int
	// The decoder reads only each spec's schedule and jitter, and decodes
	// a schedule once however many jobs share it; the columns are
	// authoritative for the rest, as for the prefetcher.
	dec := forecast.NewDecoder(lookup)
	more, err := s.cfg.Store.ForEachActiveJob(ctx, tenant, req.GetPriority(), s.cfg.MaxJobs, func(j store.ForecastJob) error {
		fj, err := dec.Job(j.Spec, j.ID.String(), j.Tenant, j.Name, j.Priority, j.Created)
		if err != nil {
			undecodable++
			return nil
		}
		b.Add(fj)
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		s.cfg.Logger.ErrorContext(ctx, "forecast: read jobs", slog.Any("error", err))
		return nil, status.Error(codes.Unavailable, "forecast: reading the jobs failed; try again")
	}
	f := b.Forecast()
	resp := forecastResponse(f)
	resp.FailedJobs += int64(undecodable)
	if more {
		note := fmt.Sprintf("read the first %d active jobs only (the api's forecast cap)", s.cfg.MaxJobs)
		if resp.Partial != "" {
			note += "; " + resp.Partial
		}
		resp.Partial = note
	}
	return resp, nil
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
