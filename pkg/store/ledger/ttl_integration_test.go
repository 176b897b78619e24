//go:build integration

package ledger_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// TestTenantTTL writes two tenants' records through one Writer and reads
// back each row's TTL (and its index entry's) from Cassandra: each is its
// tenant's, and a tenant without one gets the default.
func TestTenantTTL(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	ttls := map[string]time.Duration{"short": 2 * time.Hour, "long": 30 * 24 * time.Hour, "huge": 400 * 24 * time.Hour}
	w := ledger.NewWriter(s, ks, ledger.WithTenantTTL(func(tenant string) time.Duration { return ttls[tenant] }))
	sched := time.Now().UTC().Truncate(time.Second)
	want := map[string]int{
		"short":   int((2 * time.Hour).Seconds()),
		"long":    int((30 * 24 * time.Hour).Seconds()),
		"huge":    int(ledger.MaxTTL.Seconds()),
		"default": int(ledger.TTL.Seconds()),
	}
	jobs := map[string]uuid.UUID{}
	var recs []ledger.Rec
	for tenant := range want {
		jobs[tenant] = uuid.New()
		a := attempt(jobs[tenant], sched, 1, 0, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED)
		a.Tenant = tenant
		recs = append(recs, ledger.Rec{Attempt: a, Held: true})
	}
	if errs := w.RecordMany(ctx, recs); errs != nil {
		t.Fatal(errs)
	}
	for tenant, secs := range want {
		job := jobs[tenant]
		var got, gotIndex int
		day := sched.Format("20060102")
		q := fmt.Sprintf("SELECT TTL(status) FROM %s.%s WHERE bucket = ? AND day = ? AND job_id = ?", ks, ledger.TableAttempts)
		it := s.Iter(ctx, ledger.Statement{CQL: q, Values: []any{ledger.BucketOf(job.String()), atoi(t, day), job.String()}})
		if !it.Scan(&got) {
			t.Fatalf("%s: no row", tenant)
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		exec := recs[0].Attempt.GetExecutionId()
		for _, r := range recs {
			if r.Attempt.GetTenant() == tenant {
				exec = r.Attempt.GetExecutionId()
			}
		}
		q = fmt.Sprintf("SELECT TTL(job_id) FROM %s.%s WHERE bucket = ? AND day = ? AND execution_id = ?", ks, ledger.TableIndex)
		it = s.Iter(ctx, ledger.Statement{CQL: q, Values: []any{ledger.BucketOf(exec), atoi(t, time.Now().UTC().Format("20060102")), exec}})
		if !it.Scan(&gotIndex) {
			t.Fatalf("%s: no index entry", tenant)
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		var gotCopy int
		q = fmt.Sprintf("SELECT TTL(status) FROM %s.%s WHERE tenant = ? AND hour = ?", ks, ledger.TableByTenant)
		it = s.Iter(ctx, ledger.Statement{CQL: q, Values: []any{tenant, atoi(t, sched.Format("2006010215"))}})
		if !it.Scan(&gotCopy) {
			t.Fatalf("%s: no by-tenant copy", tenant)
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		// TTL() counts down from the write; a minute covers a slow test.
		for what, g := range map[string]int{"record": got, "index entry": gotIndex, "by-tenant copy": gotCopy} {
			if g > secs || g < secs-60 {
				t.Errorf("tenant %s: %s TTL %d s, want about %d s", tenant, what, g, secs)
			}
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}
