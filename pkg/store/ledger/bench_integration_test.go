//go:build integration

package ledger_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/store/ledger"
)

// BenchmarkRecord measures the write choices DESIGN.md discusses: logged or
// unlogged batch, with or without the fence-check read, against a
// lightweight transaction (one Paxos round on one table) for reference.
// Each op records a new attempt's RUNNING state, as a worker does at lease.
//
//	go test -tags integration -run '^$' -bench Record -benchtime 2000x ./store/ledger/
func BenchmarkRecord(b *testing.B) {
	s, ks := testLedger(b)
	ctx := ctxFor(b)
	job := uuid.New()
	base := time.Now().UTC().Truncate(time.Second)
	for _, v := range []struct {
		name string
		opts []ledger.WriterOption
	}{
		{"logged+check", nil},
		{"logged", []ledger.WriterOption{ledger.WithoutFenceCheck()}},
		{"unlogged+check", []ledger.WriterOption{ledger.WithUnloggedBatch()}},
		{"unlogged", []ledger.WriterOption{ledger.WithUnloggedBatch(), ledger.WithoutFenceCheck()}},
	} {
		b.Run(v.name, func(b *testing.B) {
			w := ledger.NewWriter(s, ks, v.opts...)
			i := 0
			for b.Loop() {
				i++
				if err := w.Record(ctx, attempt(job, base.Add(time.Duration(i)*time.Millisecond), 1, int64(i), running)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("lwt-one-table", func(b *testing.B) {
		cols := "execution_id, attempt, fence, job_id, month, scheduled_at, status"
		stmt := fmt.Sprintf("INSERT INTO %s.executions_by_id (%s) VALUES (?%s) IF NOT EXISTS", ks, cols, strings.Repeat(", ?", 6))
		i := 0
		for b.Loop() {
			i++
			it := s.Iter(ctx, ledger.Statement{CQL: stmt, Values: []any{uuid.NewString(), 1, int64(i), job.String(), 202601, base, "EXECUTION_STATUS_RUNNING"}})
			for it.Scan() {
			}
			if err := it.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGetExecution compares the two reads of an execution a worker
// can make when it asks whether a copy found done was recorded: by id (the
// index over every day an entry can live, then the slice) and by its job
// and slot (the slice alone). Each op reads one of 1,000 recorded
// executions.
//
//	go test -tags integration -run '^$' -bench GetExecution -benchtime 3000x ./store/ledger/
func BenchmarkGetExecution(b *testing.B) {
	s, ks := testLedger(b)
	ctx := ctxFor(b)
	w, r := ledger.NewWriter(s, ks), ledger.NewReader(s, ks)
	type key struct {
		job   uuid.UUID
		sched time.Time
		id    string
	}
	base := time.Now().UTC().Truncate(time.Second)
	keys := make([]key, 1000)
	recs := make([]ledger.Rec, len(keys))
	for i := range keys {
		job := uuid.New()
		a := attempt(job, base, 1, 10, succeeded)
		keys[i] = key{job, base, a.GetExecutionId()}
		recs[i] = ledger.Rec{Attempt: a, Held: true}
	}
	for _, err := range w.RecordMany(ctx, recs) {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Run("by-id", func(b *testing.B) {
		i := 0
		for b.Loop() {
			k := keys[i%len(keys)]
			i++
			if _, err := r.GetExecution(ctx, k.id); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("by-slot", func(b *testing.B) {
		i := 0
		for b.Loop() {
			k := keys[i%len(keys)]
			i++
			if _, err := r.GetSlotExecution(ctx, k.job.String(), k.sched, k.id); err != nil {
				b.Fatal(err)
			}
		}
	})
}
