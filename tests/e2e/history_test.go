//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// TestTenantTTLAndExecutionsEndToEnd runs the api with a quotas file that
// gives the test's tenant a 2-day ledger TTL: the rows the workers write
// for its firings carry that TTL (read from Cassandra), and
// ListTenantExecutions lists them across the tenant's jobs.
func TestTenantTTLAndExecutionsEndToEnd(t *testing.T) {
	t.Parallel()
	quotas := filepath.Join(t.TempDir(), "quotas.yaml")
	if err := os.WriteFile(quotas, []byte("tenants:\n  e2e:\n    ledger_ttl: 48h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := newPlatform(t, "--quotas-file", quotas)
	p.start("prefetcher-1", "prefetcher", "--node-id", "pf-1")
	p.start("worker-1", "worker", "--worker-id", "w1")
	s := newSink(t, p)
	ctx := ctxT(t, 3*time.Minute)
	cl := p.client()
	var ids []string
	for _, name := range []string{"ttl-a", "ttl-b"} {
		resp, err := cl.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{
			Name:     name,
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "* * * * * *"}, Timezone: "UTC"},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: s.url()}}},
		}})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		ids = append(ids, resp.GetJob().GetId())
	}
	since := time.Now().Add(-time.Minute)

	// Both jobs' succeeded attempts show in the tenant's listing.
	var got []*sundialv1.ExecutionAttempt
	deadline := time.Now().Add(90 * time.Second)
	for {
		got = nil
		req := &sundialv1.ListTenantExecutionsRequest{StartTime: timestamppb.New(since),
			Statuses: []sundialv1.ExecutionStatus{sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED}, PageSize: 1000}
		for {
			resp, err := cl.ListTenantExecutions(ctx, req)
			if err != nil {
				t.Fatalf("ListTenantExecutions: %v", err)
			}
			got = append(got, resp.GetAttempts()...)
			if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
				break
			}
		}
		perJob := map[string]int{}
		for _, a := range got {
			perJob[a.GetJobId()]++
		}
		if perJob[ids[0]] >= 3 && perJob[ids[1]] >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tenant's listing has %v succeeded attempts by job, want 3 of each of %v", perJob, ids)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for i, a := range got {
		if a.GetTenant() != "e2e" || a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED ||
			(i > 0 && a.GetScheduledTime().AsTime().After(got[i-1].GetScheduledTime().AsTime())) {
			t.Fatalf("listed attempt %d: %v", i, a)
		}
	}

	// The worker wrote them with the tenant's TTL, not the 90-day default.
	sess, ks := testinfra.CassandraSession(t, testinfra.CassandraCluster(t)), p.plat.Namespace().Keyspace
	a := got[0]
	var ttl int
	if err := sess.Query(`SELECT TTL(status) FROM `+ks+`.executions_by_tenant WHERE tenant = ? AND hour = ? AND scheduled_at = ? AND job_id = ? AND execution_id = ?`,
		"e2e", hourOf(a.GetScheduledTime().AsTime()), a.GetScheduledTime().AsTime(), a.GetJobId(), a.GetExecutionId()).WithContext(ctx).Scan(&ttl); err != nil {
		t.Fatal(err)
	}
	if want := int((48 * time.Hour).Seconds()); ttl > want || ttl < want-300 {
		t.Fatalf("TTL of a worker-written row: %d s, want about %d", ttl, want)
	}
	t.Logf("%d succeeded attempts listed across 2 jobs; a worker-written row lives %d s", len(got), ttl)
}

func hourOf(t time.Time) int {
	t = t.UTC()
	return ((t.Year()*100+int(t.Month()))*100+t.Day())*100 + t.Hour()
}
