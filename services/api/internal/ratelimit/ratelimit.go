// Package ratelimit bounds how fast each caller may call the api.
//
// Every authenticated call spends a turn of its caller's rate
// (Config.PerSecond calls a second, bursts of Config.Burst after being
// idle), counted by package gcra's algorithm: the one the worker's
// limits run across the cluster in Redis, here counted per process. The caller is the principal the bearer token
// stands for (auth.ActorFrom: "<tenant>/<name>", or "<tenant>/token:<fp>"
// for an unnamed token), so each token has a bucket of its own, and two
// tokens of one tenant do not starve each other. A call whose turn has not
// come is refused before its handler runs, with ResourceExhausted
// carrying a google.rpc.RetryInfo that says when it comes, and a google.rpc.QuotaFailure naming the caller; the
// HTTP/JSON API turns it into 429 with Retry-After. A refused call spends
// nothing, so a client that waits the retry delay gets through.
//
// The limit is per api process: N replicas behind a load balancer let a
// token make up to N times the rate. It guards each replica (and the
// database behind it) against one caller's loop or flood; the per-tenant
// quotas (pkg/domain/quotas) are the cluster-wide limits on what a tenant may
// create. Health checks and server reflection are not
// limited, nor are calls without a token (the authentication interceptor
// refuses those first), so the table of callers never holds more entries
// than there are configured principals (and forgets idle ones).
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/domain/gcra"
	"github.com/sundialhq/sundial/pkg/process/clock"
)

// Defaults: well above what a person, the console or schedctl does, and
// above the default create-rate quota (6,000 a minute), so a tenant at its
// quota is told so by the quota, not by this limit; low enough that one
// caller's runaway loop cannot take a replica's whole capacity.
const (
	DefaultPerSecond = 200
	DefaultBurst     = 400
)

// Config is a limit per caller.
type Config struct {
	// PerSecond is the sustained rate of calls each token may make; 0
	// turns the limit off.
	PerSecond float64
	// Burst is how many calls a token may make at once after being idle;
	// at least 1 when PerSecond is set.
	Burst int
}

// DefaultConfig is the limit the api applies unless configured otherwise.
var DefaultConfig = Config{PerSecond: DefaultPerSecond, Burst: DefaultBurst}

// Enabled reports whether c limits anything.
func (c Config) Enabled() bool { return c.PerSecond > 0 }

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.PerSecond < 0 || math.IsNaN(c.PerSecond) || math.IsInf(c.PerSecond, 0):
		return fmt.Errorf("ratelimit: per-second rate must be 0 (off) or a positive number, got %v", c.PerSecond)
	case c.Enabled() && c.Burst < 1:
		return fmt.Errorf("ratelimit: burst must be at least 1 when the rate is set, got %d", c.Burst)
	case c.Burst < 0:
		return fmt.Errorf("ratelimit: burst must not be negative, got %d", c.Burst)
	}
	return nil
}

// Limiter holds one rate per caller. The zero value is not usable; call
// New.
type Limiter struct {
	cfg     Config
	rate    gcra.Rate
	clk     clock.Clock
	limited func(tenant string)
	callers *gcra.Limiter
}

// Option configures a Limiter.
type Option func(*Limiter)

// OnLimited calls f with the caller's tenant for every refused call
// (metrics).
func OnLimited(f func(tenant string)) Option { return func(l *Limiter) { l.limited = f } }

// New returns a limiter of cfg, which must be valid; clk reads the time
// (clock.Real{} in production, a fake in tests).
func New(cfg Config, clk clock.Clock, opts ...Option) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clk == nil {
		return nil, errors.New("ratelimit: clock is required")
	}
	l := &Limiter{cfg: cfg, rate: gcra.PerSecond(cfg.PerSecond, cfg.Burst), clk: clk, callers: gcra.New()}
	for _, o := range opts {
		o(l)
	}
	return l, nil
}

// Allow spends one call of caller's rate. When its turn has not come it
// spends nothing and returns how long until it does.
func (l *Limiter) Allow(caller string) (wait time.Duration, ok bool) {
	if !l.cfg.Enabled() {
		return 0, true
	}
	if d := l.callers.Allow(caller, l.rate, l.clk.Now()); d > 0 {
		return d, false
	}
	return 0, true
}

// check admits or refuses the call whose context the authentication
// interceptor filled.
func (l *Limiter) check(ctx context.Context) error {
	actor, ok := auth.ActorFrom(ctx)
	if !ok {
		// Public methods (health, reflection): nothing to charge.
		return nil
	}
	wait, ok := l.Allow(actor)
	if ok {
		return nil
	}
	tenant, _ := auth.TenantFrom(ctx)
	if l.limited != nil {
		l.limited(tenant)
	}
	return Exhausted(actor, l.cfg, wait)
}

// Exhausted is the status of a refused call: ResourceExhausted naming the
// limit, with RetryInfo (wait, rounded up to the millisecond) and a
// QuotaFailure whose subject is the caller.
func Exhausted(caller string, cfg Config, wait time.Duration) error {
	wait = (wait + time.Millisecond - 1).Truncate(time.Millisecond)
	msg := fmt.Sprintf("request rate limit: %s may make %g calls per second (bursts of %d); retry in %s", caller, cfg.PerSecond, cfg.Burst, wait)
	st := status.New(codes.ResourceExhausted, msg)
	if d, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "caller:" + caller, Description: msg}}},
	); err == nil {
		st = d
	}
	return st.Err()
}

// UnaryServerInterceptor limits unary calls; it must run after the
// authentication interceptor.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := l.check(ctx); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor limits the start of streaming calls; it must run
// after the authentication interceptor.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := l.check(ss.Context()); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// RetryDelay is the RetryInfo delay of a status error, if it has one.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
