package peers

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/sundialhq/sundial/testkit/harness"
)

// riverPeer is River's periodic jobs: one periodic job per bench job on a
// schedule firing every second at the job's offset; the leader's periodic
// enqueuer inserts each due job with scheduled_at = its instant, and a
// queue of cfg.workers workers POSTs it to the sink. River runs in a
// database of its own, created with River's migrations and dropped at the
// end.
type riverPeer struct {
	adminDSN string // the shared cluster's DSN, to create and drop the database
	db       string
	pool     *pgxpool.Pool
	client   *river.Client[pgx.Tx]
	poll     time.Duration
}

// riverFire is the job River runs: fire bench job Job.
type riverFire struct {
	Job int `json:"job"`
}

func (riverFire) Kind() string { return "sundial_bench_fire" }

type riverWorker struct {
	river.WorkerDefaults[riverFire]
	post *poster
}

// Work POSTs the firing, due at the instant the periodic enqueuer
// scheduled the job for.
func (w *riverWorker) Work(ctx context.Context, j *river.Job[riverFire]) error {
	return w.post.post(ctx, j.Args.Job, j.ScheduledAt, "river-"+strconv.FormatInt(j.ID, 10))
}

// everySecond is a PeriodicSchedule firing every second at offset.
type everySecond struct{ offset time.Duration }

func (s everySecond) Next(t time.Time) time.Time { return nextDue(t, s.offset) }

func (p *riverPeer) setting() string {
	return fmt.Sprintf("periodic jobs with a custom PeriodicSchedule (every second at the job's offset); a database of its own; FetchCooldown and FetchPollInterval %s", p.poll)
}

func (p *riverPeer) start(ctx context.Context, cfg peerConfig) (err error) {
	p.poll = cfg.poll
	name, err := harness.UniqueName("bench_river", 48)
	if err != nil {
		return err
	}
	if err := adminExec(ctx, p.adminDSN, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("peers: river: create database: %w", err)
	}
	p.db = name
	dsn, err := withDatabase(p.adminDSN, name)
	if err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	pcfg.MaxConns = 32
	if p.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return err
	}
	driver := riverpgxv5.New(p.pool)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: cfg.log.With("peer", "river")})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("peers: river: migrate: %w", err)
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &riverWorker{post: cfg.post}); err != nil {
		return err
	}
	var periodic []*river.PeriodicJob
	for j := range cfg.jobs {
		periodic = append(periodic, river.NewPeriodicJob(everySecond{Offset(cfg.shape, j)},
			func() (river.JobArgs, *river.InsertOpts) { return riverFire{Job: j}, nil }, nil))
	}
	p.client, err = river.NewClient(driver, &river.Config{
		Logger:            cfg.log.With("peer", "river"),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.workers}},
		FetchCooldown:     cfg.poll,
		FetchPollInterval: cfg.poll,
		PeriodicJobs:      periodic,
		Workers:           workers,
	})
	if err != nil {
		return err
	}
	return p.client.Start(ctx)
}

func (p *riverPeer) stop(ctx context.Context) error {
	var errs []error
	if p.client != nil {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		errs = append(errs, p.client.Stop(sctx))
		cancel()
	}
	if p.pool != nil {
		p.pool.Close()
	}
	if p.db != "" {
		if err := adminExec(ctx, p.adminDSN, "DROP DATABASE IF EXISTS "+pgx.Identifier{p.db}.Sanitize()+" WITH (FORCE)"); err != nil {
			errs = append(errs, fmt.Errorf("peers: river: database %s left behind: %w", p.db, err))
		}
	}
	return errors.Join(errs...)
}

func (p *riverPeer) resolve(a []Arrival) []Arrival { return a }

// adminExec runs one statement on the cluster's shared database.
func adminExec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase is dsn (a postgres:// URL) pointed at database db.
func withDatabase(dsn, db string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		return "", fmt.Errorf("peers: the Postgres DSN must be a postgres:// URL")
	}
	u.Path = "/" + db
	return u.String(), nil
}
