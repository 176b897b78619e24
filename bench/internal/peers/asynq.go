package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/process/clock"
)

// asynqTask is the task type every scheduler entry enqueues.
const asynqTask = "sundial-bench:fire"

// asynqPeer is asynq's scheduler: one entry per bench job, "@every 1s"
// (robfig/cron fires it at each whole second); in the jittered shape the
// entry enqueues with ProcessIn(offset), so the task waits in asynq's
// scheduled set until its instant — as asynq sees it: the set is scored in
// whole Unix seconds, so a task due at .700 is ready at .000 and runs
// early (the report counts early arrivals). A server with cfg.workers concurrency
// runs the tasks, POSTing to the sink. asynq has no key prefix: it runs in
// a Redis database number of its own, which must be empty and is flushed
// at the end.
type asynqPeer struct {
	addr  string
	db    int
	clock clock.Clock
	poll  time.Duration

	rdb   *redis.Client
	sched *asynq.Scheduler
	srv   *asynq.Server

	// enqueuedFor is each job's second the scheduler last enqueued for,
	// set just before the enqueue (PreEnqueueFunc) and read just after
	// (PostEnqueueFunc), in UnixNano.
	enqueuedFor []atomic.Int64
	mu          sync.Mutex
	due         map[string]time.Time // task id → due instant
}

func (p *asynqPeer) setting() string {
	return fmt.Sprintf(`Scheduler entries "@every 1s" (ProcessIn(offset) in the jittered shape); Server with TaskCheckInterval and DelayedTaskCheckInterval %s; Redis DB %d of its own`, p.poll, p.db)
}

func (p *asynqPeer) start(ctx context.Context, cfg peerConfig) error {
	p.poll = cfg.poll
	p.due = map[string]time.Time{}
	p.enqueuedFor = make([]atomic.Int64, cfg.jobs)
	p.rdb = redis.NewClient(&redis.Options{Addr: p.addr, DB: p.db})
	n, err := p.rdb.DBSize(ctx).Result()
	if err != nil {
		return fmt.Errorf("peers: asynq: redis: %w", err)
	}
	if n != 0 {
		return fmt.Errorf("peers: asynq: Redis DB %d holds %d keys; pick an empty one with --asynq-redis-db", p.db, n)
	}
	opt := asynq.RedisClientOpt{Addr: p.addr, DB: p.db}
	logger := asynqLogger{cfg.log.With("peer", "asynq")}
	p.srv = asynq.NewServer(opt, asynq.Config{
		Concurrency:              cfg.workers,
		TaskCheckInterval:        cfg.poll,
		DelayedTaskCheckInterval: cfg.poll,
		Logger:                   logger,
		LogLevel:                 asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(asynqTask, func(ctx context.Context, t *asynq.Task) error {
		job, err := strconv.Atoi(string(t.Payload()))
		if err != nil {
			return fmt.Errorf("peers: asynq: payload %q: %w", t.Payload(), err)
		}
		id, _ := asynq.GetTaskID(ctx)
		return cfg.post.post(ctx, job, time.Time{}, id)
	})
	if err := p.srv.Start(mux); err != nil {
		return err
	}
	p.sched = asynq.NewScheduler(opt, &asynq.SchedulerOpts{
		Location: time.UTC,
		Logger:   logger,
		LogLevel: asynq.WarnLevel,
		PreEnqueueFunc: func(t *asynq.Task, _ []asynq.Option) {
			if job, err := strconv.Atoi(string(t.Payload())); err == nil && job >= 0 && job < len(p.enqueuedFor) {
				p.enqueuedFor[job].Store(p.clock.Now().Truncate(time.Second).UnixNano())
			}
		},
		PostEnqueueFunc: func(info *asynq.TaskInfo, err error) {
			if err != nil {
				cfg.log.Warn("asynq: enqueue failed", "err", err)
				return
			}
			job, perr := strconv.Atoi(string(info.Payload))
			if perr != nil || job < 0 || job >= len(p.enqueuedFor) {
				return
			}
			due := time.Unix(0, p.enqueuedFor[job].Load()).Add(Offset(cfg.shape, job))
			p.mu.Lock()
			p.due[info.ID] = due
			p.mu.Unlock()
		},
	})
	for j := range cfg.jobs {
		var opts []asynq.Option
		if o := Offset(cfg.shape, j); o > 0 {
			opts = append(opts, asynq.ProcessIn(o))
		}
		if _, err := p.sched.Register("@every 1s", asynq.NewTask(asynqTask, []byte(strconv.Itoa(j))), opts...); err != nil {
			return fmt.Errorf("peers: asynq: register: %w", err)
		}
	}
	return p.sched.Start()
}

func (p *asynqPeer) stop(ctx context.Context) error {
	var errs []error
	if p.sched != nil {
		p.sched.Shutdown()
	}
	if p.srv != nil {
		p.srv.Shutdown()
	}
	if p.rdb != nil {
		if err := p.rdb.FlushDB(ctx).Err(); err != nil {
			errs = append(errs, fmt.Errorf("peers: asynq: Redis DB %d not flushed: %w", p.db, err))
		}
		errs = append(errs, p.rdb.Close())
	}
	return errors.Join(errs...)
}

// resolve gives each arrival the due instant its task was enqueued for.
func (p *asynqPeer) resolve(arrivals []Arrival) []Arrival {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Arrival, len(arrivals))
	for i, a := range arrivals {
		if a.Due.IsZero() {
			a.Due = p.due[a.Key]
		}
		out[i] = a
	}
	return out
}

// asynqLogger hands asynq's log lines to slog.
type asynqLogger struct{ log *slog.Logger }

func (l asynqLogger) Debug(args ...any) { l.log.Debug("asynq", "line", fmt.Sprint(args...)) }
func (l asynqLogger) Info(args ...any)  { l.log.Info("asynq", "line", fmt.Sprint(args...)) }
func (l asynqLogger) Warn(args ...any)  { l.log.Warn("asynq", "line", fmt.Sprint(args...)) }
func (l asynqLogger) Error(args ...any) { l.log.Error("asynq", "line", fmt.Sprint(args...)) }

// Fatal is logged as an error: the benchmark decides itself when to stop.
func (l asynqLogger) Fatal(args ...any) { l.log.Error("asynq fatal", "line", fmt.Sprint(args...)) }
