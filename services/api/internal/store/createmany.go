package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sundialhq/sundial/pkg/postgres/jobwake"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// CreateItem is one job of CreateMany, beside the job its build returns.
type CreateItem struct {
	// IdempotencyKey and RequestHash are as in CreateOptions; the keys of
	// one call must differ.
	IdempotencyKey string
	RequestHash    []byte
}

// Built is the job a ManyBuildFunc decided for one item, or why the item
// is refused (an error that passes through to Created.Err).
type Built struct {
	Job *sundialv1.Job
	Err error
}

// ManyBuildFunc builds the jobs of a CreateMany: given the database clock,
// the tenant's usage and the indexes of the items that are not replays of
// an earlier create (in order), one Built per index. An error aborts the
// transaction.
type ManyBuildFunc func(now time.Time, usage Usage, fresh []int) ([]Built, error)

// CreateManyOptions are a CreateMany's parameters beside its items.
type CreateManyOptions struct {
	// IdempotencyTTL, Actor and Usage are as in CreateOptions (Usage
	// counted once, for the whole call).
	IdempotencyTTL time.Duration
	Actor          string
	Usage          UsageQuery
	// AllOrNothing writes nothing when any item is refused.
	AllOrNothing bool
}

// Created is one item's outcome in CreateMany: the job created, or the one
// its key created earlier (Existed), or why it was refused (Err: the
// build's, or *IdempotencyMismatchError).
type Created struct {
	Job     *sundialv1.Job
	Existed bool
	Err     error
}

// ErrItemsRefused is CreateMany's error when AllOrNothing and some item
// was refused: the outcomes say which, and nothing was written.
var ErrItemsRefused = errors.New("store: some items were refused; nothing was written")

// CreateMany is Create for many jobs in one transaction: the same rows
// (job, "create" audit row, wake-up notification, the create hook once),
// the same idempotency rules per item, and one quota lock and usage count
// for the call. The inserts, then the audit rows and notifications, go in
// pgx batches (one round trip each), not one statement at a time.
func (s *Store) CreateMany(ctx context.Context, tenant string, items []CreateItem, opts CreateManyOptions, build ManyBuildFunc) ([]Created, error) {
	keys := make([]string, 0, len(items))
	seen := make(map[string]int, len(items))
	for i, it := range items {
		if it.IdempotencyKey == "" {
			continue
		}
		if j, dup := seen[it.IdempotencyKey]; dup {
			return nil, fmt.Errorf("store: items %d and %d share an idempotency key", j, i)
		}
		seen[it.IdempotencyKey] = i
		keys = append(keys, it.IdempotencyKey)
	}
	if len(keys) > 0 && opts.IdempotencyTTL <= 0 {
		return nil, fmt.Errorf("store: an idempotency key needs a positive TTL, got %s", opts.IdempotencyTTL)
	}
	var out []Created
	err := s.inTx(ctx, func(tx pgx.Tx, now time.Time) error {
		out = make([]Created, len(items))
		expiredAt := now.Add(-opts.IdempotencyTTL)
		refused := false
		fresh := make([]int, 0, len(items))
		var held map[string]keyedJob
		if len(keys) > 0 {
			var err error
			if held, err = lookUpKeys(ctx, tx, tenant, keys, expiredAt); err != nil {
				return err
			}
		}
		for i, it := range items {
			k, ok := held[it.IdempotencyKey]
			if !ok {
				fresh = append(fresh, i)
				continue
			}
			job, err := k.replay(it.RequestHash, opts.IdempotencyTTL)
			out[i] = Created{Job: job, Existed: err == nil, Err: err}
			refused = refused || err != nil
		}
		if refused && opts.AllOrNothing {
			return ErrItemsRefused
		}
		if len(fresh) == 0 {
			return nil
		}
		usage, err := countUsage(ctx, tx, tenant, opts.Usage)
		if err != nil {
			return err
		}
		built, err := build(now, usage, fresh)
		if err != nil {
			return err
		}
		if len(built) != len(fresh) {
			return fmt.Errorf("store: build returned %d jobs for %d items", len(built), len(fresh))
		}
		var inserts pgx.Batch
		var inserted []int
		for n, i := range fresh {
			b := built[n]
			if b.Err != nil {
				out[i] = Created{Err: b.Err}
				refused = true
				continue
			}
			j := b.Job
			if j.GetTenant() != tenant {
				return fmt.Errorf("store: built job belongs to %q, not %q", j.GetTenant(), tenant)
			}
			id, err := uuid.Parse(j.GetId())
			if err != nil {
				return fmt.Errorf("store: built job id: %w", err)
			}
			args, err := insertJobArgs(tenant, j, id, items[i].IdempotencyKey, items[i].RequestHash, now)
			if err != nil {
				return err
			}
			inserts.Queue(insertJobSQL, args...)
			out[i] = Created{Job: j}
			inserted = append(inserted, i)
		}
		if refused && opts.AllOrNothing {
			return ErrItemsRefused
		}
		if len(inserted) == 0 {
			return nil
		}
		var raced []string
		if err := runBatch(ctx, tx, &inserts, func(n int, tag pgconn.CommandTag) {
			if tag.RowsAffected() == 0 {
				// As in Create: a concurrent create with the same key
				// committed first; read its job below.
				raced = append(raced, items[inserted[n]].IdempotencyKey)
				out[inserted[n]] = Created{}
			}
		}); err != nil {
			return fmt.Errorf("store: insert jobs: %w", err)
		}
		if len(raced) > 0 {
			won, err := lookUpKeys(ctx, tx, tenant, raced, expiredAt)
			if err != nil {
				return err
			}
			for _, i := range inserted {
				if out[i].Job != nil {
					continue
				}
				k, ok := won[items[i].IdempotencyKey]
				if !ok {
					return fmt.Errorf("store: idempotency key of item %d conflicted but holds no live job", i)
				}
				job, err := k.replay(items[i].RequestHash, opts.IdempotencyTTL)
				out[i] = Created{Job: job, Existed: err == nil, Err: err}
				if err != nil && opts.AllOrNothing {
					return ErrItemsRefused
				}
			}
		}
		var after pgx.Batch
		queued := batchExecer{&after}
		for _, i := range inserted {
			c := out[i]
			if c.Job == nil || c.Existed {
				continue
			}
			args, err := auditArgs(tenant, c.Job.GetId(), c.Job.GetVersion(), now, createAudit(opts.Actor, items[i].IdempotencyKey, c.Job))
			if err != nil {
				return err
			}
			after.Queue(auditSQL, args...)
			if err := notifyIfScheduled(ctx, queued, c.Job); err != nil {
				return err
			}
		}
		if after.Len() == 0 {
			return nil
		}
		if err := runBatch(ctx, tx, &after, nil); err != nil {
			return fmt.Errorf("store: record created jobs: %w", err)
		}
		if s.onCreate != nil {
			return s.onCreate(ctx, tx, tenant)
		}
		return nil
	})
	if errors.Is(err, ErrItemsRefused) {
		return out, err
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// runBatch sends b in one round trip and reads every result, passing each
// statement's command tag to each (when not nil).
func runBatch(ctx context.Context, tx pgx.Tx, b *pgx.Batch, each func(n int, tag pgconn.CommandTag)) error {
	res := tx.SendBatch(ctx, b)
	for n := range b.Len() {
		tag, err := res.Exec()
		if err != nil {
			_ = res.Close()
			return err
		}
		if each != nil {
			each(n, tag)
		}
	}
	return res.Close()
}

// batchExecer queues what jobwake.Notify executes into a batch, so the
// notification SQL stays jobwake's own.
type batchExecer struct{ b *pgx.Batch }

func (q batchExecer) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.b.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

var _ jobwake.Execer = batchExecer{}
