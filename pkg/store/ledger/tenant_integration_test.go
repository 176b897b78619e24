//go:build integration

package ledger_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// TestListByTenant records attempts of several jobs of two tenants over
// three hours and lists one tenant's across jobs: newest slot first,
// bounded by the range, filtered by status, in pages whose tokens are
// bound to the query, a superseded fence reported FENCED.
func TestListByTenant(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	w, r := ledger.NewWriter(s, ks), ledger.NewReader(s, ks)
	base := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	jobs := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	var recs []ledger.Rec
	// acme: every job every 10 minutes for 3 hours (54 slots); every
	// fourth slot failed. globex: one job, same slots.
	n := 0
	for m := 0; m < 180; m += 10 {
		at := base.Add(time.Duration(m) * time.Minute)
		for j, job := range jobs {
			st := succeeded
			if n%4 == 0 {
				st = failed
			}
			n++
			a := attempt(job, at.Add(time.Duration(j)*time.Second), 1, 100, st)
			recs = append(recs, ledger.Rec{Attempt: a, Held: true})
		}
		g := attempt(uuid.New(), at, 1, 100, succeeded)
		g.Tenant = "globex"
		recs = append(recs, ledger.Rec{Attempt: g, Held: true})
	}
	// A stale holder's record of the newest acme slot, under a lower fence.
	stale := attempt(jobs[2], base.Add(170*time.Minute+2*time.Second), 1, 50, succeeded)
	recs = append(recs, ledger.Rec{Attempt: stale, Held: true})
	if errs := w.RecordMany(ctx, recs); errs != nil {
		t.Fatal(errs)
	}

	q := ledger.TenantQuery{Tenant: "acme", From: base, To: base.Add(3 * time.Hour), PageSize: 7}
	var all []*sundialv1.ExecutionAttempt
	pages := 0
	for {
		page, next, err := r.ListByTenant(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, page...)
		if next == "" {
			break
		}
		q.PageToken = next
	}
	if len(all) != 55 || pages < 8 {
		t.Fatalf("%d rows in %d pages, want 55 (54 + one FENCED) in 8+", len(all), pages)
	}
	for i, a := range all {
		if a.GetTenant() != "acme" {
			t.Fatalf("row %d of tenant %q", i, a.GetTenant())
		}
		if i > 0 && a.GetScheduledTime().AsTime().After(all[i-1].GetScheduledTime().AsTime()) {
			t.Fatalf("row %d is newer than row %d", i, i-1)
		}
	}
	if all[0].GetStatus() == fenced || all[1].GetStatus() != fenced || all[1].GetFenceToken() != 50 {
		t.Fatalf("newest attempt's rows: %v / %v", all[0], all[1])
	}

	// Failed only, in the last hour only.
	q = ledger.TenantQuery{Tenant: "acme", From: base.Add(2 * time.Hour), To: base.Add(3 * time.Hour),
		Statuses: []sundialv1.ExecutionStatus{failed}}
	page, next, err := r.ListByTenant(ctx, q)
	if err != nil || next != "" {
		t.Fatalf("failed in the last hour: %v next %q", err, next)
	}
	if len(page) == 0 {
		t.Fatal("no failed attempt listed")
	}
	for _, a := range page {
		at := a.GetScheduledTime().AsTime()
		if a.GetStatus() != failed || at.Before(q.From) || !at.Before(q.To) {
			t.Fatalf("listed %s %s", at, a.GetStatus())
		}
	}
	var wantFailed int
	for _, rc := range recs {
		a := rc.Attempt
		at := a.GetScheduledTime().AsTime()
		if a.GetTenant() == "acme" && a.GetStatus() == failed && !at.Before(q.From) && at.Before(q.To) {
			wantFailed++
		}
	}
	if len(page) != wantFailed {
		t.Fatalf("%d failed listed, want %d", len(page), wantFailed)
	}

	// A token is bound to its query.
	q = ledger.TenantQuery{Tenant: "acme", From: base, To: base.Add(3 * time.Hour), PageSize: 2}
	_, next, err = r.ListByTenant(ctx, q)
	if err != nil || next == "" {
		t.Fatal(next, err)
	}
	q.Tenant, q.PageToken = "globex", next
	if _, _, err := r.ListByTenant(ctx, q); !errors.Is(err, ledger.ErrInvalidPageToken) {
		t.Fatalf("a token replayed for another tenant: %v", err)
	}
	if _, _, err := r.ListByTenant(ctx, ledger.TenantQuery{Tenant: "acme", From: base, To: base.Add(32 * 24 * time.Hour)}); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("a 32-day range: %v", err)
	}
}
