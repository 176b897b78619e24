package peers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
)

// The headers a peer's request carries: the job's number, its due instant
// (RFC 3339 with nanoseconds; absent when the peer cannot know it, as
// asynq's handler cannot) and the peer's own id of the execution.
const (
	HeaderJob = "Peer-Job"
	HeaderDue = "Peer-Due"
	HeaderKey = "Peer-Key"
)

// Arrival is one request the sink received.
type Arrival struct {
	Job int
	Due time.Time // zero: the peer did not say (resolved later by Key)
	Key string
	At  time.Time // when the request's headers were read
	Err error     // the headers did not parse
}

// Sink is the HTTP target every peer fires: it records the arrival instant
// of every request and answers 200 at once.
type Sink struct {
	clock clock.Clock
	ln    net.Listener
	srv   *http.Server
	done  chan struct{}
	serve error

	mu       sync.Mutex
	arrivals []Arrival
}

// NewSink listens on a free loopback port. Close stops it.
func NewSink(c clock.Clock) (*Sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("peers: sink: %w", err)
	}
	s := &Sink{clock: c, ln: ln, done: make(chan struct{})}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.serve = err
		}
	}()
	return s, nil
}

// URL is where peers POST.
func (s *Sink) URL() string { return "http://" + s.ln.Addr().String() + "/fire" }

// Close stops the server and waits for it.
func (s *Sink) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	return errors.Join(err, s.serve)
}

func (s *Sink) handle(w http.ResponseWriter, r *http.Request) {
	a := ParseArrival(s.clock.Now(), r.Header.Get)
	s.mu.Lock()
	s.arrivals = append(s.arrivals, a)
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// ParseArrival reads a request's headers (get) received at at.
func ParseArrival(at time.Time, get func(string) string) Arrival {
	a := Arrival{At: at, Key: get(HeaderKey)}
	var errs []error
	var err error
	if a.Job, err = strconv.Atoi(get(HeaderJob)); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", HeaderJob, err))
	}
	if d := get(HeaderDue); d != "" {
		if a.Due, err = time.Parse(time.RFC3339Nano, d); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", HeaderDue, err))
		}
	}
	a.Err = errors.Join(errs...)
	return a
}

// Arrivals copies what arrived so far, in arrival order.
func (s *Sink) Arrivals() []Arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Arrival(nil), s.arrivals...)
}

// Count is how many requests arrived so far.
func (s *Sink) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.arrivals)
}

// poster POSTs one firing to the sink: what every peer's worker does.
type poster struct {
	url    string
	client *http.Client
}

func newPoster(url string, conns int) *poster {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = conns
	tr.MaxIdleConnsPerHost = conns
	return &poster{url: url, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// payload is the body every peer sends, the same small JSON body as
// Sundial's benchmark jobs.
var payload = []byte(`{"source":"sundial-bench","kind":"tick"}`)

// post fires job's firing due at due (zero: unknown to the caller) with the
// peer's key, and fails unless the sink answered 2xx.
func (p *poster) post(ctx context.Context, job int, due time.Time, key string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderJob, strconv.Itoa(job))
	if !due.IsZero() {
		req.Header.Set(HeaderDue, due.UTC().Format(time.RFC3339Nano))
	}
	req.Header.Set(HeaderKey, key)
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("peers: sink answered %s", resp.Status)
	}
	return nil
}

func (p *poster) close() { p.client.CloseIdleConnections() }
