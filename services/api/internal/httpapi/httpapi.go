// Package httpapi serves Sundial's HTTP/JSON API and the web console on one
// HTTP listener.
//
// The JSON API is grpc-gateway's reverse proxy, generated from the HTTP
// bindings in proto/sundial/v1/http.yaml. It is a gRPC client of the api's
// own gRPC server in the same process (an in-process connection, see
// server.GRPC.DialLocal), not a second implementation beside it: every
// HTTP call goes through the same interceptors (metrics, bearer-token
// authentication and tenant scoping, tracing) and the same handlers and
// validation as a gRPC call, and a gRPC status becomes an HTTP status with
// the status's details in the body (InvalidArgument is 400 with the
// google.rpc.BadRequest field list). The in-process hop costs a fraction of
// a millisecond; in exchange, nothing about auth or validation can differ
// between the two ways in. With TLS on (Config.TLS) the HTTP listener
// serves it, HTTP/2 included; the in-process hop needs none.
//
// grpc-gateway rather than Connect: the api's gRPC server, interceptors and
// clients (schedctl, workers' tests, the bench) stay as they are, and the
// gateway yields REST-shaped routes (GET /v1/jobs/{id}) and a generated
// OpenAPI document, which is what a caller without a gRPC toolchain wants.
// Connect would mean moving the server off grpc-go and its interceptors, and
// its JSON protocol is RPC-shaped (POST /sundial.v1.JobService/GetJob).
//
// Routes: /v1/... the API (docs/http-api.md), /v1/openapi.json its OpenAPI
// 2.0 document (no token needed), and everything else the Console handler
// when one is configured.
package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/proto/openapi"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/ratelimit"
)

// MaxBodyBytes bounds a request body. A job's payload is at most 256 KiB,
// and protobuf's JSON mapping carries bytes as base64 (a third more); the
// bound leaves room for the rest of the job and stops a client from making
// the api buffer an unbounded body.
const MaxBodyBytes = 4 << 20

// maxResponseBytes bounds what the in-process client accepts from the gRPC
// server: a ListJobs page of 1,000 jobs with large payloads exceeds
// grpc-go's 4 MiB default.
const maxResponseBytes = 1 << 30

// Config configures the HTTP server.
type Config struct {
	// Addr is host:port to listen on; port 0 picks one (see Addr).
	Addr string
	// Conn is the in-process connection to the api's own gRPC server (see
	// Dial); the server owns it from New on and closes it on Stop.
	Conn *grpc.ClientConn
	// Console, when set, serves every path outside /v1/.
	Console http.Handler
	Logger  *slog.Logger
	// StopTimeout bounds how long Stop waits for open requests; 15 s by
	// default.
	StopTimeout time.Duration
	// TLS, when set, serves HTTPS (pkg/process/connsec.ServerCerts.Config("h2",
	// "http/1.1")); the console's session cookie is then always Secure.
	// nil: plain HTTP.
	TLS *tls.Config
}

// Server is the HTTP listener as a lifecycle.Service.
type Server struct {
	cfg    Config
	conn   *grpc.ClientConn
	mux    *http.ServeMux
	runner lifecycle.Runner

	mu sync.Mutex
	ln net.Listener
}

// New builds the server and its in-process gRPC client (which dials lazily,
// on the first call).
func New(cfg Config) (*Server, error) {
	if cfg.Conn == nil {
		return nil, errors.New("httpapi: Conn is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 15 * time.Second
	}
	conn := cfg.Conn
	gw, err := Gateway(context.Background(), conn)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", http.MaxBytesHandler(gw, MaxBodyBytes))
	mux.HandleFunc("GET /v1/openapi.json", serveOpenAPI)
	if cfg.Console != nil {
		mux.Handle("/", cfg.Console)
	}
	return &Server{cfg: cfg, conn: conn, mux: mux}, nil
}

// Dial opens the gateway's client connection to the api's own gRPC
// server through dial, the server's in-process dialer
// (server.GRPC.DialLocal). Transport credentials are insecure because the
// connection never leaves the process; the calls still carry the caller's
// bearer token to the server's interceptors. The first dial happens on the
// first call.
func Dial(dial func(context.Context) (net.Conn, error)) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("passthrough:///sundial-api",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return dial(ctx)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxResponseBytes)),
	)
	if err != nil {
		return nil, fmt.Errorf("httpapi: in-process client: %w", err)
	}
	return conn, nil
}

// Gateway is the JSON API's handler: JobService, DeadLetterService,
// SigningKeyService, CalendarService and TokenService routes proxied to
// conn.
func Gateway(ctx context.Context, conn *grpc.ClientConn) (http.Handler, error) {
	mux := runtime.NewServeMux(
		// Field names as in the protos (snake_case), as schedctl -o json
		// prints them and the docs write them; requests may use either.
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		runtime.WithErrorHandler(writeError),
	)
	if err := sundialv1.RegisterJobServiceHandler(ctx, mux, conn); err != nil {
		return nil, fmt.Errorf("httpapi: JobService routes: %w", err)
	}
	if err := sundialv1.RegisterDeadLetterServiceHandler(ctx, mux, conn); err != nil {
		return nil, fmt.Errorf("httpapi: DeadLetterService routes: %w", err)
	}
	if err := sundialv1.RegisterSigningKeyServiceHandler(ctx, mux, conn); err != nil {
		return nil, fmt.Errorf("httpapi: SigningKeyService routes: %w", err)
	}
	if err := sundialv1.RegisterCalendarServiceHandler(ctx, mux, conn); err != nil {
		return nil, fmt.Errorf("httpapi: CalendarService routes: %w", err)
	}
	if err := sundialv1.RegisterTokenServiceHandler(ctx, mux, conn); err != nil {
		return nil, fmt.Errorf("httpapi: TokenService routes: %w", err)
	}
	if err := sundialv1.RegisterForecastServiceHandler(ctx, mux, conn); err != nil {
		return nil, fmt.Errorf("httpapi: ForecastService routes: %w", err)
	}
	if err := sundialv1.RegisterAuditServiceHandler(ctx, mux, conn); err != nil {
		return nil, fmt.Errorf("httpapi: AuditService routes: %w", err)
	}
	return mux, nil
}

// incomingHeader forwards W3C trace context, so an HTTP caller's trace
// continues through the gRPC handler, on top of the gateway's defaults
// (Authorization, and Grpc-Metadata-* headers).
func incomingHeader(key string) (string, bool) {
	switch strings.ToLower(key) {
	case "traceparent", "tracestate":
		return strings.ToLower(key), true
	}
	return runtime.DefaultHeaderMatcher(key)
}

// writeError is grpc-gateway's error answer (the google.rpc.Status as JSON:
// code, message, details) plus a WWW-Authenticate challenge on 401, as
// RFC 6750 asks of bearer-token APIs, and a Retry-After (whole seconds,
// rounded up) on an answer carrying google.rpc.RetryInfo, such as the rate
// limit's 429, for HTTP clients that read the header rather than the body.
func writeError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if d, ok := ratelimit.RetryDelay(err); ok {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(max((d+time.Second-1)/time.Second, 1)), 10))
	}
	if status.Code(err) == codes.Unauthenticated {
		// The default handler puts the status message in the header;
		// replace it with a challenge just before the status goes out.
		w = challenge{w}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

type challenge struct{ http.ResponseWriter }

func (c challenge) WriteHeader(code int) {
	c.Header().Set("WWW-Authenticate", `Bearer realm="sundial"`)
	c.ResponseWriter.WriteHeader(code)
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openapi.Document)
}

// Handler serves every route; for tests that need no listener.
func (s *Server) Handler() http.Handler { return s.mux }

// Addr is the bound address once started, else the configured one.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return s.cfg.Addr
	}
	return s.ln.Addr().String()
}

// Start listens and serves in the background.
func (s *Server) Start(ctx context.Context) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("httpapi: listen %s: %w", s.cfg.Addr, err)
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	srv := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 10 * time.Second,
		// A slow or stuck client cannot hold a connection for ever; the
		// longest calls (a backfill of 100,000 slots) finish well inside.
		ReadTimeout:  time.Minute,
		WriteTimeout: 2 * time.Minute,
		IdleTimeout:  2 * time.Minute,
		ErrorLog:     log.New(serverErrors{s.cfg.Logger}, "", 0),
	}
	serve := srv.Serve
	if s.cfg.TLS != nil {
		// The configuration brings its own certificate (reloaded at each
		// handshake), so ServeTLS loads no file.
		srv.TLSConfig = s.cfg.TLS
		serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
	}
	err = s.runner.Run(func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- serve(ln) }()
		s.cfg.Logger.Info("http server listening", "addr", ln.Addr().String(), "tls", s.cfg.TLS != nil)
		select {
		case err := <-errc:
			return fmt.Errorf("httpapi: serve: %w", err)
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), s.cfg.StopTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			s.cfg.Logger.Warn("http graceful stop timed out, closing connections", "timeout", s.cfg.StopTimeout)
			_ = srv.Close()
		}
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	if err != nil {
		_ = ln.Close()
	}
	return err
}

// serverErrors is net/http's error log as the api's: a warning with the
// message as an attribute, except failed TLS handshakes, which a TCP
// health check of a load balancer or a port scan makes every few seconds
// and which say nothing about the api: those are debug.
type serverErrors struct{ log *slog.Logger }

func (e serverErrors) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := slog.LevelWarn
	if strings.HasPrefix(msg, "http: TLS handshake error") {
		level = slog.LevelDebug
	}
	e.log.Log(context.Background(), level, "http server error", "err", msg)
	return len(p), nil
}

// Done is closed when the server stopped serving; Err says why, when it
// was not Stop (lifecycle.Watched).
func (s *Server) Done() <-chan struct{} { return s.runner.Done() }

// Err is why the server stopped serving on its own, if it did.
func (s *Server) Err() error { return s.runner.Err() }

var _ lifecycle.Watched = (*Server)(nil)

// Stop drains open requests (up to StopTimeout) and closes the in-process
// connection; safe before Start and more than once.
func (s *Server) Stop() {
	s.runner.Stop()
	_ = s.conn.Close()
}
