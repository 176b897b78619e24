package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/signature"
)

// sinkOpts are sink's flags.
type sinkOpts struct{ addr, secret string }

func (o *sinkOpts) register(fs *flag.FlagSet, e *env) {
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8099", "address to listen on")
	fs.StringVar(&o.secret, "signing-secret", e.io.Getenv("SUNDIAL_SIGNING_SECRET"), "your tenant's signing key (schedctl signing-key create shows it), to verify signatures (env SUNDIAL_SIGNING_SECRET)")
}

// runSink implements
//
//	schedctl sink [--addr HOST:PORT] [--signing-secret S]
//
// a small HTTP target for trying Sundial out: it answers 200 to every
// request and prints one line per request with the execution id, the slot,
// the lateness at arrival and whether the signature verifies. `make run`
// starts one and points its demo job at it.
func runSink(ctx context.Context, e *env, o *sinkOpts, _ []string) int {
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		fmt.Fprintf(e.io.Stderr, "schedctl sink: %v\n", err)
		return 1
	}
	s := &sink{out: e.io.Stdout, secret: []byte(o.secret), now: e.now}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(e.io.Stderr, "schedctl sink: listening on http://%s/\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		fmt.Fprintf(e.io.Stderr, "schedctl sink: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	<-errc
	return 0
}

// sink prints one line per request it receives.
type sink struct {
	out    io.Writer
	secret []byte
	now    func() time.Time

	mu sync.Mutex // one line at a time
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	received := s.now()
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	h := r.Header.Get
	id := h(firing.HeaderExecutionID)
	late := "-"
	if at, err := time.Parse(time.RFC3339Nano, h(firing.HeaderScheduledAt)); err == nil {
		late = received.Sub(at).Round(10 * time.Microsecond).String()
	}
	sig := "unchecked"
	if len(s.secret) > 0 {
		if err := signature.Verify(s.secret, h(firing.HeaderSignature), id, body, received, 5*time.Minute); err != nil {
			sig = "BAD(" + err.Error() + ")"
		} else {
			sig = "ok"
		}
	}
	s.mu.Lock()
	fmt.Fprintf(s.out, "%s %s %s execution=%s job=%s scheduled=%s attempt=%s fence=%s late=%s signature=%s bytes=%d\n",
		received.UTC().Format(time.RFC3339Nano), r.Method, r.URL.Path, id, h(firing.HeaderJobID),
		h(firing.HeaderScheduledAt), h(firing.HeaderAttempt), h(firing.HeaderFenceToken), late, sig, len(body))
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}
