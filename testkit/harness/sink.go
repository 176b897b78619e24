package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
)

// Via is how a delivery reached the sink.
type Via uint8

// The ways a target is reached.
const (
	ViaHTTP Via = iota + 1
	ViaKafka
)

func (v Via) String() string {
	switch v {
	case ViaHTTP:
		return "http"
	case ViaKafka:
		return "kafka"
	}
	return "unknown"
}

// Delivery is one request (or record) the sink received.
type Delivery struct {
	Via         Via
	ExecutionID uuid.UUID // Sundial-Execution-Id
	JobID       uuid.UUID // Sundial-Job-Id
	Scheduled   time.Time // Sundial-Scheduled-At: the slot
	Received    time.Time // by the sink's clock, when the request's headers were read
	Fence       int64
	Attempt     int32
	CatchUp     bool
	// Err says what was wrong with the delivery's identity: an
	// Idempotency-Key other than the execution id, an unparsable header, a
	// signature that does not verify. Nil for a good delivery.
	Err error
}

// Sink is a target recording every delivery. It serves HTTP on a loopback
// port and can also read Kafka topics that jobs produce to.
type Sink struct {
	keys  *Keys // the tenants' signing keys, which verify every delivery
	clock clock.Clock

	ln  net.Listener
	srv *http.Server

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the HTTP server and Kafka readers
	serveMu sync.Mutex
	serve   error

	conns atomic.Int64 // HTTP connections accepted

	mu        sync.Mutex
	all       []Delivery
	counts    map[uuid.UUID]uint32
	hangUntil time.Time // see Hang
}

// SinkOption configures NewSink.
type SinkOption func(*sinkOptions)

type sinkOptions struct {
	addr  string
	clock clock.Clock
}

// SinkAddr listens on addr instead of a free loopback port.
func SinkAddr(addr string) SinkOption { return func(o *sinkOptions) { o.addr = addr } }

// SinkClock stamps arrivals with c instead of the real clock.
func SinkClock(c clock.Clock) SinkOption { return func(o *sinkOptions) { o.clock = c } }

// NewSink starts a sink verifying signatures with keys (each request must
// carry its tenant's key's signature, as the tenant's target checks; see
// Namespace.SigningKeys). Close stops it and closes keys.
func NewSink(keys *Keys, opts ...SinkOption) (*Sink, error) {
	o := sinkOptions{addr: "127.0.0.1:0", clock: clock.Real{}}
	for _, opt := range opts {
		opt(&o)
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		keys.Close()
		return nil, fmt.Errorf("harness: sink: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sink{
		keys:   keys,
		clock:  o.clock,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		counts: map[uuid.UUID]uint32{},
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serveHTTP), ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				s.conns.Add(1)
			}
		}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.serveMu.Lock()
			s.serve = err
			s.serveMu.Unlock()
		}
	}()
	return s, nil
}

// Keys are the keys the sink verifies with.
func (s *Sink) Keys() *Keys { return s.keys }

// Connections is how many HTTP connections the sink has accepted so far: a
// worker that reuses its connections to a host opens a handful, one that
// does not opens one per request.
func (s *Sink) Connections() int64 { return s.conns.Load() }

// Addr is the sink's host:port.
func (s *Sink) Addr() string { return s.ln.Addr().String() }

// URL is the HTTP target URL to give jobs.
func (s *Sink) URL() string { return "http://" + s.Addr() + "/fire" }

// SlowURL is a target URL at which the sink answers each request d after
// it arrived (the arrival is recorded at once, as at URL): a slow target
// for the jobs given it, beside fast ones at URL.
func (s *Sink) SlowURL(d time.Duration) string {
	return s.URL() + "?" + delayParam + "=" + d.String()
}

// delayParam is SlowURL's query parameter.
const delayParam = "sundial_sink_delay"

// Close stops the HTTP server and every Kafka reader, and waits for them.
func (s *Sink) Close() error {
	s.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	s.wg.Wait()
	s.keys.Close()
	s.serveMu.Lock()
	defer s.serveMu.Unlock()
	return errors.Join(err, s.serve)
}

func (s *Sink) serveHTTP(w http.ResponseWriter, r *http.Request) {
	received := s.clock.Now()
	body, err := io.ReadAll(r.Body)
	d := s.parse(ViaHTTP, received, r.Header.Get, body)
	if err != nil {
		d.Err = errors.Join(d.Err, fmt.Errorf("read body: %w", err))
	}
	s.add(d)
	s.mu.Lock()
	until := s.hangUntil
	s.mu.Unlock()
	if d, err := time.ParseDuration(r.URL.Query().Get(delayParam)); err == nil && received.Add(d).After(until) {
		until = received.Add(d)
	}
	if wait := until.Sub(received); wait > 0 {
		t := s.clock.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C():
		case <-r.Context().Done():
			return // the client gave up (its attempt timed out)
		case <-s.ctx.Done():
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// Hang makes the sink a target that accepts requests and does not answer:
// every HTTP request arriving before until is recorded as usual, then its
// answer is held until until (or until the client gives up). A zero until
// ends it.
func (s *Sink) Hang(until time.Time) {
	s.mu.Lock()
	s.hangUntil = until
	s.mu.Unlock()
}

func (s *Sink) parse(via Via, received time.Time, get func(string) string, body []byte) Delivery {
	d := Delivery{Via: via, Received: received, CatchUp: get(firing.HeaderCatchUp) == "true"}
	var errs []error
	execID := get(firing.HeaderExecutionID)
	var err error
	if d.ExecutionID, err = uuid.Parse(execID); err != nil {
		errs = append(errs, fmt.Errorf("%s %q: %w", firing.HeaderExecutionID, execID, err))
	}
	if d.JobID, err = uuid.Parse(get(firing.HeaderJobID)); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", firing.HeaderJobID, err))
	}
	if d.Scheduled, err = time.Parse(time.RFC3339Nano, get(firing.HeaderScheduledAt)); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", firing.HeaderScheduledAt, err))
	}
	if d.Fence, err = strconv.ParseInt(get(firing.HeaderFenceToken), 10, 64); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", firing.HeaderFenceToken, err))
	}
	attempt, err := strconv.ParseInt(get(firing.HeaderAttempt), 10, 32)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", firing.HeaderAttempt, err))
	}
	d.Attempt = int32(attempt)
	if key := get(firing.HeaderIdempotencyKey); key != execID {
		errs = append(errs, fmt.Errorf("%s %q differs from the execution id %q", firing.HeaderIdempotencyKey, key, execID))
	} else if err := s.keys.Verify(get(firing.HeaderSignature), execID, body, received, 5*time.Minute); err != nil {
		errs = append(errs, err)
	}
	d.Err = errors.Join(errs...)
	return d
}

func (s *Sink) add(d Delivery) {
	s.mu.Lock()
	s.all = append(s.all, d)
	s.counts[d.ExecutionID]++
	s.mu.Unlock()
}

// ReadKafka records every record of topic (from its start) until Close.
// Jobs with a Kafka target produce there; brokers are the bootstrap list.
func (s *Sink) ReadKafka(brokers []string, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return fmt.Errorf("harness: sink kafka reader: %w", err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cl.Close()
		for {
			fs := cl.PollFetches(s.ctx)
			if s.ctx.Err() != nil {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				get := func(k string) string {
					for _, h := range r.Headers {
						if h.Key == k {
							return string(h.Value)
						}
					}
					return ""
				}
				s.add(s.parse(ViaKafka, s.clock.Now(), get, r.Value))
			})
		}
	}()
	return nil
}

// Deliveries copies every delivery so far, in arrival order.
func (s *Sink) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.all...)
}

// ByExecution groups the deliveries so far by execution id, each group in
// arrival order.
func (s *Sink) ByExecution() map[uuid.UUID][]Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[uuid.UUID][]Delivery, len(s.counts))
	for _, d := range s.all {
		m[d.ExecutionID] = append(m[d.ExecutionID], d)
	}
	return m
}

// Counts is how many distinct executions and how many deliveries arrived.
func (s *Sink) Counts() (distinct, raw int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.counts), len(s.all)
}

// Missing counts the slots of want no delivery has arrived for.
func (s *Sink) Missing(want Expected) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id := range want {
		if s.counts[id] == 0 {
			n++
		}
	}
	return n
}

// Await polls until a delivery arrived for every slot of want or ctx ends,
// then waits quiet more, so late duplicates can show. It returns an error
// naming how many slots are missing when ctx ends first.
func (s *Sink) Await(ctx context.Context, want Expected, quiet time.Duration) error {
	for {
		missing := s.Missing(want)
		if missing == 0 {
			break
		}
		if err := s.sleep(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("harness: %d of %d expected firings never arrived: %w", missing, len(want), err)
		}
	}
	_ = s.sleep(ctx, quiet)
	return nil
}

// sleep waits d on the sink's clock, or until ctx ends.
func (s *Sink) sleep(ctx context.Context, d time.Duration) error {
	t := s.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
