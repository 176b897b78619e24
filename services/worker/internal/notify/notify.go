// Package notify posts a job's completion notifications: when an execution
// succeeds, and when it dies (its final failure, which is also its entry in
// the dead-letter queue — one notification, event "dead"), the job's
// callback_url receives a JSON summary, signed like a target request
// (pkg/domain/signature over the execution id and the body).
//
// Notifications are best effort and never on the firing path: the executor
// hands them over without waiting (a full queue drops them, counted), a few
// goroutines send them, a failed send is tried again a few times with a
// backoff, and the outbound-address policy applies as it does to targets.
// A receiver dedupes on Idempotency-Key (<execution id>:<event>).
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/netpolicy"
	"github.com/sundialhq/sundial/pkg/domain/signature"
	"github.com/sundialhq/sundial/pkg/process/clock"
)

// Events.
const (
	EventSucceeded = "succeeded"
	EventDead      = "dead"
	// EventCancelled: the execution was cancelled (JobService.CancelExecution,
	// or an overlap policy); no attempt of it follows.
	EventCancelled = firing.EventCancelled
)

// HeaderEvent names the event of a notification.
const HeaderEvent = firing.HeaderEvent

// Summary is the body of a notification.
type Summary struct {
	Event       string `json:"event"`
	ExecutionID string `json:"execution_id"`
	JobID       string `json:"job_id"`
	Tenant      string `json:"tenant"`
	// Status is the execution's final ledger status name.
	Status string `json:"status"`
	// Attempt is the last attempt's number; Attempts how many this round made.
	Attempt    int32     `json:"attempt"`
	Attempts   int32     `json:"attempts"`
	Error      string    `json:"error,omitempty"`
	ErrorClass string    `json:"error_class,omitempty"`
	HTTPStatus int       `json:"http_status,omitempty"`
	Scheduled  time.Time `json:"scheduled_time"`
	Finished   time.Time `json:"finished_time"`
	CatchUp    bool      `json:"catch_up,omitempty"`
	// DeadLetter: the execution is in the dead-letter queue.
	DeadLetter bool `json:"dead_letter,omitempty"`
}

// Config tunes the notifier.
type Config struct {
	Workers   int
	QueueSize int
	// Timeout bounds one request.
	Timeout time.Duration
	// Attempts per notification (the first included).
	Attempts int
	// Backoff before the second attempt; it doubles.
	Backoff time.Duration
	// DrainTimeout bounds how long Stop keeps sending queued notifications.
	DrainTimeout time.Duration
	// Signer signs callbacks (the worker's: each tenant's own keys); nil:
	// the secret New was given signs every callback.
	Signer Signer
}

// DefaultConfig values.
var DefaultConfig = Config{Workers: 4, QueueSize: 1024, Timeout: 10 * time.Second, Attempts: 3, Backoff: time.Second, DrainTimeout: 5 * time.Second}

// Metrics observes the notifier: results are ok, retry, failed, refused,
// dropped.
type Metrics struct{ Result func(result string) }

type job struct {
	url string
	s   Summary
}

// Notifier is a lifecycle.Service.
type Notifier struct {
	client *http.Client
	signer Signer
	policy *netpolicy.Policy
	clk    clock.Clock
	cfg    Config
	m      Metrics
	logger *slog.Logger

	queue chan job
	quit  chan struct{}
	hard  context.Context
	kill  context.CancelFunc

	mu       sync.Mutex
	started  bool
	stopped  bool
	wg       sync.WaitGroup
	stopOnce sync.Once
}

// New returns a notifier sending with client (its transport should carry
// the outbound policy's dialer; policy also checks URLs' hosts up front).
func New(client *http.Client, secret []byte, policy *netpolicy.Policy, clk clock.Clock, cfg Config, m Metrics, logger *slog.Logger) *Notifier {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultConfig.Workers
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultConfig.QueueSize
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultConfig.Timeout
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = DefaultConfig.Attempts
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultConfig.Backoff
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultConfig.DrainTimeout
	}
	var signer Signer = secretSigner(secret)
	if cfg.Signer != nil {
		signer = cfg.Signer
	}
	hard, kill := context.WithCancel(context.Background())
	return &Notifier{client: client, signer: signer, policy: policy, clk: clk, cfg: cfg, m: m, logger: logger,
		queue: make(chan job, cfg.QueueSize), quit: make(chan struct{}), hard: hard, kill: kill}
}

// Signer makes a callback's signature header for the job's tenant;
// the worker's *signing.Keyring signs with the tenant's own keys.
type Signer interface {
	Sign(tenant string, ts time.Time, executionID string, body []byte) string
}

type secretSigner []byte

func (s secretSigner) Sign(_ string, ts time.Time, executionID string, body []byte) string {
	return signature.Sign(s, ts, executionID, body)
}

func (n *Notifier) count(result string) {
	if n.m.Result != nil {
		n.m.Result(result)
	}
}

// Notify queues a notification to callbackURL without waiting; it reports
// false (and counts "dropped") when the queue is full or the notifier
// stopped.
func (n *Notifier) Notify(callbackURL string, s Summary) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		n.count("dropped")
		return false
	}
	select {
	case n.queue <- job{callbackURL, s}:
		return true
	default:
		n.count("dropped")
		n.logger.Warn("notification queue full, dropping a notification", "execution_id", s.ExecutionID, "event", s.Event)
		return false
	}
}

// Start runs the senders.
func (n *Notifier) Start(context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started || n.stopped {
		return nil
	}
	n.started = true
	for range n.cfg.Workers {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.run()
		}()
	}
	return nil
}

// Stop sends what is queued for up to DrainTimeout, then abandons the rest.
func (n *Notifier) Stop() {
	n.stopOnce.Do(func() {
		n.mu.Lock()
		n.stopped = true
		started := n.started
		n.mu.Unlock()
		close(n.quit)
		if started {
			t := n.clk.NewTimer(n.cfg.DrainTimeout)
			done := make(chan struct{})
			go func() { n.wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-t.C():
				n.kill()
				<-done
			}
			t.Stop()
		}
		n.kill()
		for {
			select {
			case <-n.queue:
				n.count("dropped")
			default:
				return
			}
		}
	})
}

func (n *Notifier) run() {
	for {
		select {
		case j := <-n.queue:
			n.send(j)
		case <-n.quit:
			// Drain what is queued, then leave.
			for {
				select {
				case j := <-n.queue:
					if n.hard.Err() != nil {
						n.count("dropped")
						continue
					}
					n.send(j)
				default:
					return
				}
			}
		}
	}
}

func (n *Notifier) send(j job) {
	body, err := json.Marshal(j.s)
	if err != nil {
		n.count("failed")
		return
	}
	backoff := n.cfg.Backoff
	for attempt := 1; ; attempt++ {
		retryable, err := n.post(j, body)
		if err == nil {
			n.count("ok")
			return
		}
		if errors.Is(err, netpolicy.ErrRefused) {
			n.count("refused")
			n.logger.Warn("completion notification refused by the outbound-address policy", "execution_id", j.s.ExecutionID, "err", err)
			return
		}
		if !retryable || attempt >= n.cfg.Attempts || n.hard.Err() != nil {
			n.count("failed")
			n.logger.Warn("completion notification failed", "execution_id", j.s.ExecutionID, "event", j.s.Event, "attempts", attempt, "err", err)
			return
		}
		n.count("retry")
		t := n.clk.NewTimer(backoff)
		select {
		case <-t.C():
		case <-n.hard.Done():
			t.Stop()
			n.count("failed")
			return
		}
		backoff *= 2
	}
}

// post sends one request; it reports whether a failure may be retried.
func (n *Notifier) post(j job, body []byte) (bool, error) {
	// The api's rule (jobspec.CheckURL): a callback stored before it was
	// checked is refused here, never sent as written. The error does not
	// repeat the URL, whose query may hold a token.
	if err := jobspec.CheckURL(j.url); err != nil {
		return false, fmt.Errorf("notify: callback url: %w", err)
	}
	u, err := url.Parse(j.url)
	if err != nil {
		return false, errors.New("notify: callback url does not parse")
	}
	if n.policy != nil {
		port := uint16(80)
		if u.Scheme == "https" {
			port = 443
		}
		if err := n.policy.CheckURLHost(u.Host, port); err != nil {
			return false, err
		}
	}
	ctx, cancel := context.WithTimeout(n.hard, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sundial-worker")
	req.Header.Set(HeaderEvent, j.s.Event)
	req.Header.Set(firing.HeaderExecutionID, j.s.ExecutionID)
	req.Header.Set(firing.HeaderJobID, j.s.JobID)
	req.Header.Set(firing.HeaderIdempotencyKey, j.s.ExecutionID+":"+j.s.Event)
	req.Header.Set(firing.HeaderSignature, n.signer.Sign(j.s.Tenant, n.clk.Now(), j.s.ExecutionID, body))
	resp, err := n.client.Do(req)
	if err != nil {
		return true, fmt.Errorf("notify: POST %s: %w", u.Redacted(), err)
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode >= 500:
		return true, fmt.Errorf("notify: POST %s: status %d", u.Redacted(), resp.StatusCode)
	default:
		return false, fmt.Errorf("notify: POST %s: status %d", u.Redacted(), resp.StatusCode)
	}
}
