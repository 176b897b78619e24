package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/ratelimit"
)

// MaxRequestBytes is the largest request message the server reads. Jobs
// carry at most jobspec.MaxPayloadBytes (256 KiB) of payload, but the limit
// sits well above it so that an oversized payload reaches validation and
// is refused as InvalidArgument naming `payload`, like any other bad field;
// with the limit near the payload's, a 10 MB payload got the transport's
// ResourceExhausted ("received message larger than max") instead. Only a
// request above this (garbage, or an attack on memory) gets that answer.
const MaxRequestBytes = 16 << 20

// QuotaRequestRate is the quota label of calls refused by the per-token
// request rate limit (RateLimit).
const QuotaRequestRate = "request_rate"

// GRPCConfig configures the api's gRPC server.
type GRPCConfig struct {
	// Addr is host:port to listen on; port 0 picks one (see Addr).
	Addr string
	// Tokens authenticates every call but health checks and reflection.
	Tokens *auth.Tokens
	// Jobs serves sundial.v1.JobService.
	Jobs sundialv1.JobServiceServer
	// DeadLetters serves sundial.v1.DeadLetterService; nil leaves it
	// unregistered (Unimplemented).
	DeadLetters sundialv1.DeadLetterServiceServer
	// SigningKeys serves sundial.v1.SigningKeyService; nil leaves it
	// unregistered (Unimplemented: per-tenant signing keys are off).
	SigningKeys sundialv1.SigningKeyServiceServer
	// Calendars serves sundial.v1.CalendarService; nil leaves it
	// unregistered (Unimplemented).
	Calendars sundialv1.CalendarServiceServer
	// TokenService serves sundial.v1.TokenService (the api-made bearer
	// tokens, services/api/internal/tokens); nil leaves it unregistered.
	TokenService sundialv1.TokenServiceServer
	// Forecast serves sundial.v1.ForecastService; nil leaves it
	// unregistered.
	Forecast sundialv1.ForecastServiceServer
	// Audit serves sundial.v1.AuditService; nil leaves it unregistered.
	Audit   sundialv1.AuditServiceServer
	Metrics *Metrics
	Logger  *slog.Logger
	// GracefulTimeout bounds how long Stop waits for in-flight calls
	// before cutting them off; 15 s by default.
	GracefulTimeout time.Duration
	// Tracer makes every Sundial call a server span; nil: tracing off.
	Tracer trace.Tracer
	// RateLimit bounds each token's calls (services/api/internal/ratelimit);
	// the zero value is no limit.
	RateLimit ratelimit.Config
	// Clock times the rate limit; nil: the real clock.
	Clock clock.Clock
	// StoresReady, when set, says whether the stores every call needs are
	// ready: an api started while Postgres was down serves health checks
	// at once, and every other call answers Unavailable with its error
	// (naming the store) until it is nil.
	StoresReady func(context.Context) error
	// TLS, when set, is the network listener's server configuration
	// (pkg/process/connsec.ServerCerts.Config("h2")): every connection from the
	// network handshakes with it, and with mutual TLS presents a client
	// certificate, before any call is read. nil: plaintext. In-process
	// connections (DialLocal) never handshake.
	TLS *tls.Config
}

// GRPC is the api's gRPC server as a lifecycle.Service. Stop marks every
// service NOT_SERVING in the health service (so load balancers and clients
// that watch health move away), stops accepting calls, lets in-flight ones
// finish within GracefulTimeout, then cuts off whatever is left.
type GRPC struct {
	cfg    GRPCConfig
	srv    *grpc.Server
	health *health.Server
	local  *localListener
	runner lifecycle.Runner

	mu sync.Mutex
	ln net.Listener
}

// NewGRPC builds the server with health, reflection, the JobService and
// the DeadLetterService registered, behind the metrics and authentication interceptors.
func NewGRPC(cfg GRPCConfig) (*GRPC, error) {
	if cfg.Tokens == nil {
		return nil, errors.New("server: Tokens is required")
	}
	if cfg.Jobs == nil {
		return nil, errors.New("server: Jobs is required")
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.GracefulTimeout <= 0 {
		cfg.GracefulTimeout = 15 * time.Second
	}
	// Metrics outermost (after the trace, when there is one), so refused
	// calls are counted too. The rate limit charges the caller the tokens
	// resolved, so it comes after them.
	unary := []grpc.UnaryServerInterceptor{cfg.Metrics.UnaryServerInterceptor(), cfg.Tokens.UnaryServerInterceptor()}
	stream := []grpc.StreamServerInterceptor{cfg.Metrics.StreamServerInterceptor(), cfg.Tokens.StreamServerInterceptor()}
	if cfg.StoresReady != nil {
		// After the tokens, so a caller without one learns nothing of
		// the stores.
		unary = append(unary, storesReadyUnary(cfg.StoresReady))
		stream = append(stream, storesReadyStream(cfg.StoresReady))
	}
	if cfg.RateLimit.Enabled() {
		if cfg.Clock == nil {
			cfg.Clock = clock.Real{}
		}
		lim, err := ratelimit.New(cfg.RateLimit, cfg.Clock, ratelimit.OnLimited(func(string) {
			cfg.Metrics.quotaRejections.WithLabelValues(QuotaRequestRate).Inc()
		}))
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		unary = append(unary, lim.UnaryServerInterceptor())
		stream = append(stream, lim.StreamServerInterceptor())
	}
	if cfg.Tracer != nil {
		unary = append([]grpc.UnaryServerInterceptor{traceUnary(cfg.Tracer)}, append(unary, tenantOnSpan())...)
	}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		// Close connections idle for long, so a client behind a NAT or a
		// load balancer re-resolves instead of holding a dead path.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(newListenerCredentials(credentials.NewTLS(cfg.TLS))))
	}
	srv := grpc.NewServer(opts...)
	h := health.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	sundialv1.RegisterJobServiceServer(srv, cfg.Jobs)
	if cfg.DeadLetters != nil {
		// Same interceptors, so the same tokens and tenancy.
		sundialv1.RegisterDeadLetterServiceServer(srv, cfg.DeadLetters)
	}
	if cfg.SigningKeys != nil {
		sundialv1.RegisterSigningKeyServiceServer(srv, cfg.SigningKeys)
	}
	if cfg.Calendars != nil {
		sundialv1.RegisterCalendarServiceServer(srv, cfg.Calendars)
	}
	if cfg.TokenService != nil {
		sundialv1.RegisterTokenServiceServer(srv, cfg.TokenService)
	}
	if cfg.Forecast != nil {
		sundialv1.RegisterForecastServiceServer(srv, cfg.Forecast)
	}
	if cfg.Audit != nil {
		sundialv1.RegisterAuditServiceServer(srv, cfg.Audit)
	}
	reflection.Register(srv)
	// Not serving until Start: a probe during start-up gets a truthful
	// answer.
	h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	h.SetServingStatus(sundialv1.JobService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	if cfg.DeadLetters != nil {
		h.SetServingStatus(sundialv1.DeadLetterService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	if cfg.SigningKeys != nil {
		h.SetServingStatus(sundialv1.SigningKeyService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	if cfg.Calendars != nil {
		h.SetServingStatus(sundialv1.CalendarService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	if cfg.TokenService != nil {
		h.SetServingStatus(sundialv1.TokenService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	if cfg.Forecast != nil {
		h.SetServingStatus(sundialv1.ForecastService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	if cfg.Audit != nil {
		h.SetServingStatus(sundialv1.AuditService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	return &GRPC{cfg: cfg, srv: srv, health: h, local: newLocalListener()}, nil
}

// DialLocal opens an in-process connection to the server, for the HTTP
// gateway's gRPC client (grpc.WithContextDialer): the calls go through
// every interceptor, but neither TLS nor a network port. It waits until
// the server serves (Start) and fails once it stopped.
func (g *GRPC) DialLocal(ctx context.Context) (net.Conn, error) {
	return g.local.dial(ctx)
}

// Addr is the bound address once started, else the configured one.
func (g *GRPC) Addr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln == nil {
		return g.cfg.Addr
	}
	return g.ln.Addr().String()
}

// Start listens and serves in the background.
func (g *GRPC) Start(ctx context.Context) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", g.cfg.Addr)
	if err != nil {
		return fmt.Errorf("grpc: listen %s: %w", g.cfg.Addr, err)
	}
	g.mu.Lock()
	g.ln = ln
	g.mu.Unlock()
	// Ready at start (the common case): SERVING before Start returns, as
	// a probe right after Start expects; judged here, not in the loop's
	// goroutine, which may not have run yet when Start returns.
	readyAtStart := g.cfg.StoresReady == nil || g.cfg.StoresReady(ctx) == nil
	if readyAtStart {
		g.health.Resume()
	}
	err = g.runner.Run(func(ctx context.Context) error {
		errc := make(chan error, 1)
		localErrc := make(chan error, 1)
		go func() { errc <- g.srv.Serve(ln) }()
		go func() { localErrc <- g.srv.Serve(g.local) }()
		fctx, stopFollowing := context.WithCancel(ctx)
		followed := make(chan struct{})
		if readyAtStart {
			close(followed)
		} else {
			go func() { defer close(followed); g.followStores(fctx) }()
		}
		// The health answers stop following the stores before the drain
		// says NOT_SERVING for good.
		unfollow := func() { stopFollowing(); <-followed }
		g.cfg.Logger.Info("grpc server listening", "addr", ln.Addr().String(), "tls", g.cfg.TLS != nil)
		select {
		case err := <-errc:
			unfollow()
			g.srv.Stop()
			<-localErrc
			return fmt.Errorf("grpc: serve: %w", err)
		case err := <-localErrc:
			unfollow()
			g.srv.Stop()
			<-errc
			return fmt.Errorf("grpc: serve in-process: %w", err)
		case <-ctx.Done():
		}
		unfollow()
		g.drain()
		// A Serve that began only after the drain stopped the server
		// returns ErrServerStopped: nothing was lost.
		return errors.Join(servedUntilStop(<-errc), servedUntilStop(<-localErrc))
	})
	if err != nil {
		_ = ln.Close()
	}
	return err
}

// Done is closed when the server stopped serving; Err says why, when it
// was not Stop (lifecycle.Watched).
func (g *GRPC) Done() <-chan struct{} { return g.runner.Done() }

// Err is why the server stopped serving on its own, if it did.
func (g *GRPC) Err() error { return g.runner.Err() }

var _ lifecycle.Watched = (*GRPC)(nil)

func servedUntilStop(err error) error {
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// storesPoll is how often the health answers look at the stores again
// while they are not ready.
const storesPoll = 250 * time.Millisecond

// followStores makes the health service's answers SERVING once the stores
// are ready (GRPCConfig.StoresReady): an api started while Postgres is
// down answers every call but the health check Unavailable, so its health
// says NOT_SERVING until Postgres answers and is migrated, and a load
// balancer probing it sends it nothing meanwhile. Without StoresReady, or
// with the stores ready at start, it is SERVING at once.
func (g *GRPC) followStores(ctx context.Context) {
	clk := g.cfg.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	for waited := false; ; waited = true {
		if g.cfg.StoresReady == nil || g.cfg.StoresReady(ctx) == nil {
			if ctx.Err() != nil {
				return
			}
			g.health.Resume()
			if waited {
				g.cfg.Logger.Info("grpc health: serving, the stores are ready")
			}
			return
		}
		t := clk.NewTimer(storesPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// drain is the shutdown sequence: NOT_SERVING, graceful stop, hard stop.
func (g *GRPC) drain() {
	g.health.Shutdown()
	done := make(chan struct{})
	go func() {
		g.srv.GracefulStop()
		close(done)
	}()
	timer := time.NewTimer(g.cfg.GracefulTimeout)
	defer timer.Stop()
	select {
	case <-done:
		g.cfg.Logger.Info("grpc server stopped")
	case <-timer.C:
		g.cfg.Logger.Warn("grpc graceful stop timed out, cutting off calls", "timeout", g.cfg.GracefulTimeout)
		g.srv.Stop()
		<-done
	}
}

// Stop drains and stops the server; safe before Start and more than once.
func (g *GRPC) Stop() {
	g.runner.Stop()
	// Never started: nothing listens, but release what NewGRPC built.
	g.mu.Lock()
	started := g.ln != nil
	g.mu.Unlock()
	if !started {
		g.srv.Stop()
		_ = g.local.Close()
	}
}
