//go:build integration

package server

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// TestIntegrationListByNextFire: next_fire_after and next_fire_before
// bound next_fire_time, carried by page tokens like the other filters.
func TestIntegrationListByNextFire(t *testing.T) {
	h := newHarness(t, nil)
	base := time.Now().Add(time.Hour).Truncate(time.Minute)
	var ids []string
	for i := range 6 {
		j := everyMinute("once-" + strconv.Itoa(i))
		j.Schedule = &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(base.Add(time.Duration(i) * time.Hour))}}
		ids = append(ids, h.create(tokenAcme, j).GetId())
	}
	list := func(req *sundialv1.ListJobsRequest) []string {
		t.Helper()
		var out []string
		for {
			resp, err := h.client.ListJobs(h.ctx, req, as(tokenAcme))
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range resp.GetJobs() {
				out = append(out, j.GetId())
			}
			if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
				return out
			}
		}
	}
	from, before := timestamppb.New(base.Add(time.Hour)), timestamppb.New(base.Add(4*time.Hour))
	if got := list(&sundialv1.ListJobsRequest{PageSize: 2, NextFireAfter: from, NextFireBefore: before}); !slices.Equal(got, ids[1:4]) {
		t.Fatalf("next fire in [+1h, +4h): %v, want %v", got, ids[1:4])
	}
	if got := list(&sundialv1.ListJobsRequest{NextFireAfter: timestamppb.New(base.Add(5 * time.Hour))}); !slices.Equal(got, ids[5:]) {
		t.Fatalf("next fire from +5h: %v", got)
	}
	if got := list(&sundialv1.ListJobsRequest{NextFireBefore: timestamppb.New(base.Add(time.Minute))}); !slices.Equal(got, ids[:1]) {
		t.Fatalf("next fire before +1m: %v", got)
	}
	// A page token is bound to its bounds.
	resp, err := h.client.ListJobs(h.ctx, &sundialv1.ListJobsRequest{PageSize: 1, NextFireAfter: from}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.ListJobs(h.ctx, &sundialv1.ListJobsRequest{PageToken: resp.GetNextPageToken()}, as(tokenAcme)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a token without its bounds: %v", err)
	}
	_, err = h.client.ListJobs(h.ctx, &sundialv1.ListJobsRequest{NextFireAfter: before, NextFireBefore: from}, as(tokenAcme))
	if v := violations(t, err); v["next_fire_before"] == "" {
		t.Fatalf("inverted bounds: %v", err)
	}
	// Paused jobs have no next fire and match no bound.
	if _, err := h.client.PauseJob(h.ctx, &sundialv1.PauseJobRequest{Id: ids[2]}, as(tokenAcme)); err != nil {
		t.Fatal(err)
	}
	if got := list(&sundialv1.ListJobsRequest{NextFireAfter: from, NextFireBefore: before}); !slices.Equal(got, []string{ids[1], ids[3]}) {
		t.Fatalf("after pausing %s: %v", ids[2], got)
	}
}

// TestIntegrationBulkJobAction: a dry run counts and changes nothing; a
// pause by label in pages of 5 changes every match and only the tenant's,
// each as PauseJob would (version, audit row, published version, dropped
// firings); a repeat changes nothing; a token does not carry over to
// another action; and what an action does not apply to is refused by name.
func TestIntegrationBulkJobAction(t *testing.T) {
	h := newHarness(t, nil)
	var billing, ops []*sundialv1.Job
	for i := range 12 {
		billing = append(billing, h.create(tokenAcme, everyMinute("billing-"+strconv.Itoa(i))))
	}
	for i := range 3 {
		j := everyMinute("ops-" + strconv.Itoa(i))
		j.Labels = map[string]string{"team": "ops"}
		ops = append(ops, h.create(tokenAcme, j))
	}
	theirs := h.create(tokenGlobex, everyMinute("globex-billing"))
	h.stageFake(billing[0], 3)
	label := map[string]string{"team": "billing"}

	dry, err := h.client.BulkJobAction(h.ctx, &sundialv1.BulkJobActionRequest{Action: sundialv1.BulkAction_BULK_ACTION_PAUSE, Labels: label, DryRun: true}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if dry.GetMatched() != 12 || dry.GetCappedCount() || len(dry.GetSample()) != 12 || dry.GetChanged() != 0 {
		t.Fatalf("dry run: matched %d capped %v sample %d changed %d", dry.GetMatched(), dry.GetCappedCount(), len(dry.GetSample()), dry.GetChanged())
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE status = 'paused'`); n != 0 {
		t.Fatalf("the dry run paused %d jobs", n)
	}

	var changed, matched int64
	calls := 0
	tok := ""
	for {
		resp, err := h.client.BulkJobAction(h.ctx, &sundialv1.BulkJobActionRequest{Action: sundialv1.BulkAction_BULK_ACTION_PAUSE,
			Labels: label, Limit: 5, PageToken: tok}, as(tokenAcmeOps))
		if err != nil {
			t.Fatal(err)
		}
		calls++
		changed += resp.GetChanged()
		matched += resp.GetMatched()
		if calls == 1 {
			// A pause's token does not continue a delete.
			_, err := h.client.BulkJobAction(h.ctx, &sundialv1.BulkJobActionRequest{Action: sundialv1.BulkAction_BULK_ACTION_DELETE,
				Labels: label, PageToken: resp.GetNextPageToken()}, as(tokenAcme))
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("a pause token used for a delete: %v", err)
			}
		}
		if tok = resp.GetNextPageToken(); tok == "" {
			break
		}
	}
	if calls != 3 || changed != 12 || matched != 12 {
		t.Fatalf("%d calls changed %d of %d, want 3 calls changing 12", calls, changed, matched)
	}
	for _, j := range billing {
		got, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: j.GetId()}, as(tokenAcme))
		if err != nil || got.GetJob().GetStatus() != sundialv1.JobStatus_JOB_STATUS_PAUSED || got.GetJob().GetVersion() != j.GetVersion()+1 {
			t.Fatalf("%s after the bulk pause: %v version %d (%v)", j.GetName(), got.GetJob().GetStatus(), got.GetJob().GetVersion(), err)
		}
		if v := h.versions.of(j.GetId()); len(v) == 0 || v[len(v)-1] != j.GetVersion()+1 {
			t.Fatalf("%s: published versions %v", j.GetName(), v)
		}
	}
	if n := h.count(`SELECT count(*) FROM job_audit WHERE action = 'pause' AND actor = 'acme/ops'`); n != 12 {
		t.Fatalf("%d pause audit rows by acme/ops, want 12", n)
	}
	if n := h.outboxRows(billing[0].GetId()); n != 0 {
		t.Fatalf("%d firings of a paused job left in the outbox", n)
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE status = 'paused' AND (tenant <> 'acme' OR NOT labels @> '{"team":"billing"}')`); n != 0 {
		t.Fatalf("%d jobs outside the filter paused", n)
	}

	// Again: every job is already paused, nothing changes.
	again, err := h.client.BulkJobAction(h.ctx, &sundialv1.BulkJobActionRequest{Action: sundialv1.BulkAction_BULK_ACTION_PAUSE, Labels: label}, as(tokenAcme))
	if err != nil || again.GetChanged() != 0 || again.GetMatched() != 12 {
		t.Fatalf("repeat: changed %d of %d (%v)", again.GetChanged(), again.GetMatched(), err)
	}

	// Deleted jobs cannot be paused: refused by name, the rest unaffected.
	if _, err := h.client.DeleteJob(h.ctx, &sundialv1.DeleteJobRequest{Id: ops[0].GetId()}, as(tokenAcme)); err != nil {
		t.Fatal(err)
	}
	ref, err := h.client.BulkJobAction(h.ctx, &sundialv1.BulkJobActionRequest{Action: sundialv1.BulkAction_BULK_ACTION_PAUSE,
		Status: sundialv1.JobStatus_JOB_STATUS_DELETED}, as(tokenAcme))
	if err != nil || len(ref.GetRefused()) != 1 || ref.GetRefused()[0].GetName() != "ops-0" || ref.GetChanged() != 0 {
		t.Fatalf("pausing deleted jobs: %v (%v)", ref, err)
	}

	// Resume by filter, then the tenant-wide audit trail holds both
	// tenants' changes apart.
	res, err := h.client.BulkJobAction(h.ctx, &sundialv1.BulkJobActionRequest{Action: sundialv1.BulkAction_BULK_ACTION_RESUME,
		Status: sundialv1.JobStatus_JOB_STATUS_PAUSED}, as(tokenAcme))
	if err != nil || res.GetChanged() != 12 {
		t.Fatalf("resume paused: %v (%v)", res, err)
	}
	trail, err := h.client.ListJobAudit(h.ctx, &sundialv1.ListJobAuditRequest{PageSize: 1000}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	jobsSeen := map[string]bool{}
	actions := map[string]int{}
	for _, e := range trail.GetEntries() {
		if e.GetTenant() != "acme" {
			t.Fatalf("acme's trail holds %v", e)
		}
		jobsSeen[e.GetJobId()] = true
		actions[e.GetAction()]++
	}
	if len(jobsSeen) != 15 || actions["create"] != 15 || actions["pause"] != 12 || actions["resume"] != 12 || actions["delete"] != 1 {
		t.Fatalf("acme's trail: %d jobs, actions %v", len(jobsSeen), actions)
	}
	if trail.GetEntries()[0].GetAction() != "resume" {
		t.Fatalf("the trail is not newest first: %v", trail.GetEntries()[0])
	}
	page, err := h.client.ListJobAudit(h.ctx, &sundialv1.ListJobAuditRequest{PageSize: 30}, as(tokenAcme))
	if err != nil || page.GetNextPageToken() == "" {
		t.Fatalf("first page of 30: %v", err)
	}
	rest, err := h.client.ListJobAudit(h.ctx, &sundialv1.ListJobAuditRequest{PageSize: 1000, PageToken: page.GetNextPageToken()}, as(tokenAcme))
	if err != nil || len(page.GetEntries())+len(rest.GetEntries()) != len(trail.GetEntries()) {
		t.Fatalf("paged trail: %d + %d of %d (%v)", len(page.GetEntries()), len(rest.GetEntries()), len(trail.GetEntries()), err)
	}
	if _, err := h.client.ListJobAudit(h.ctx, &sundialv1.ListJobAuditRequest{Id: billing[0].GetId(), PageToken: page.GetNextPageToken()}, as(tokenAcme)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("the tenant trail's token used for one job: %v", err)
	}
	g, err := h.client.ListJobAudit(h.ctx, &sundialv1.ListJobAuditRequest{}, as(tokenGlobex))
	if err != nil || len(g.GetEntries()) != 1 || g.GetEntries()[0].GetJobId() != theirs.GetId() {
		t.Fatalf("globex's trail: %v (%v)", g, err)
	}

	// Bad requests name their field.
	_, err = h.client.BulkJobAction(h.ctx, &sundialv1.BulkJobActionRequest{Labels: label}, as(tokenAcme))
	if v := violations(t, err); v["action"] == "" {
		t.Fatalf("no action: %v", err)
	}
	_, err = h.client.BulkJobAction(h.ctx, &sundialv1.BulkJobActionRequest{Action: sundialv1.BulkAction_BULK_ACTION_PAUSE, Limit: -1}, as(tokenAcme))
	if v := violations(t, err); v["limit"] == "" {
		t.Fatalf("negative limit: %v", err)
	}
}

// TestIntegrationBulkChangesInGroups: a bulk pause over more jobs than one
// transaction groups changes each job as PauseJob would across the groups'
// boundaries; and within a group (store.MutateEach), a job its decision
// refuses is reported without undoing the others of its group.
func TestIntegrationBulkChangesInGroups(t *testing.T) {
	h := newHarness(t, nil)
	n := 2*bulkGroup + 30
	label := map[string]string{"team": "grouped"}
	var jobs []*sundialv1.Job
	for i := range n {
		j := everyMinute("grouped-" + strconv.Itoa(i))
		j.Labels = label
		jobs = append(jobs, h.create(tokenAcme, j))
	}
	h.stageFake(jobs[bulkGroup+1], 3)
	resp, err := h.client.BulkJobAction(h.ctx, &sundialv1.BulkJobActionRequest{Action: sundialv1.BulkAction_BULK_ACTION_PAUSE, Labels: label, Limit: int32(n)}, as(tokenAcmeOps))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetMatched() != int64(n) || resp.GetChanged() != int64(n) || len(resp.GetRefused()) != 0 {
		t.Fatalf("matched %d, changed %d, refused %v; want %d changed", resp.GetMatched(), resp.GetChanged(), resp.GetRefused(), n)
	}
	for _, j := range jobs {
		got, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: j.GetId()}, as(tokenAcme))
		if err != nil || got.GetJob().GetStatus() != sundialv1.JobStatus_JOB_STATUS_PAUSED || got.GetJob().GetVersion() != j.GetVersion()+1 {
			t.Fatalf("%s after the bulk pause: %v version %d (%v)", j.GetName(), got.GetJob().GetStatus(), got.GetJob().GetVersion(), err)
		}
		if v := h.versions.of(j.GetId()); len(v) == 0 || v[len(v)-1] != j.GetVersion()+1 {
			t.Fatalf("%s: published versions %v", j.GetName(), v)
		}
	}
	if c := h.count(`SELECT count(*) FROM job_audit WHERE action = 'pause' AND actor = 'acme/ops'`); c != n {
		t.Fatalf("%d pause audit rows, want one per job (%d)", c, n)
	}
	if got := h.outboxRows(jobs[bulkGroup+1].GetId()); got != 0 {
		t.Fatalf("%d firings of a paused job left in the outbox", got)
	}

	// One group, two of its jobs refused by the decision and one gone.
	st := store.New(h.pool)
	refuse := map[string]bool{jobs[3].GetId(): true, jobs[40].GetId(): true}
	ids := []string{jobs[0].GetId(), jobs[3].GetId(), "00000000-0000-4000-8000-000000000000", jobs[40].GetId(), jobs[41].GetId()}
	no := status.Error(codes.FailedPrecondition, "refused for the test")
	muts, err := st.MutateEach(h.ctx, "acme", ids, store.Change{Audit: store.Audit{Actor: "acme/test", Action: store.ActionResume}, DropReason: pausedReason},
		func(_ time.Time, cur *sundialv1.Job) (*sundialv1.Job, error) {
			if refuse[cur.GetId()] {
				return nil, no
			}
			cur.Status = sundialv1.JobStatus_JOB_STATUS_ACTIVE
			return cur, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(muts) != len(ids) {
		t.Fatalf("%d outcomes for %d jobs", len(muts), len(ids))
	}
	for i, m := range muts {
		switch {
		case m.ID != ids[i]:
			t.Fatalf("outcome %d is of %s, want %s", i, m.ID, ids[i])
		case refuse[m.ID] && m.Err != no:
			t.Fatalf("%s: %v, want the refusal", m.ID, m.Err)
		case i == 2 && !errors.Is(m.Err, store.ErrNotFound):
			t.Fatalf("a job that does not exist: %v", m.Err)
		case !refuse[m.ID] && i != 2 && (m.Err != nil || !m.Mutated.Changed):
			t.Fatalf("%s: %+v", m.ID, m)
		}
	}
	for _, i := range []int{0, 3, 40, 41} {
		got, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: jobs[i].GetId()}, as(tokenAcme))
		if err != nil {
			t.Fatal(err)
		}
		want := sundialv1.JobStatus_JOB_STATUS_ACTIVE
		if refuse[jobs[i].GetId()] {
			want = sundialv1.JobStatus_JOB_STATUS_PAUSED
		}
		if got.GetJob().GetStatus() != want {
			t.Fatalf("%s: %v, want %v", jobs[i].GetName(), got.GetJob().GetStatus(), want)
		}
	}
	if c := h.count(`SELECT count(*) FROM job_audit WHERE actor = 'acme/test'`); c != 2 {
		t.Fatalf("%d audit rows of the group, want 2 (the refused and the missing write none)", c)
	}
}

// TestIntegrationBulkPassesOverLockedJobs: a job another transaction holds
// (as a prefetcher staging its chunk does) does not stop a bulk delete:
// every other job is deleted while the lock is held, and the held one is
// deleted once the lock is let go, within the same call.
func TestIntegrationBulkPassesOverLockedJobs(t *testing.T) {
	h := newHarness(t, nil)
	n := bulkGroup + 20
	label := map[string]string{"team": "held"}
	var jobs []*sundialv1.Job
	for i := range n {
		j := everyMinute("held-" + strconv.Itoa(i))
		j.Labels = label
		jobs = append(jobs, h.create(tokenAcme, j))
	}
	held := jobs[5]
	tx, err := h.pool.Begin(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(h.ctx) //nolint:errcheck // committed below unless the test failed first
	if _, err := tx.Exec(h.ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, held.GetId()); err != nil {
		t.Fatal(err)
	}
	type result struct {
		resp *sundialv1.BulkJobActionResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := h.client.BulkJobAction(h.ctx, &sundialv1.BulkJobActionRequest{Action: sundialv1.BulkAction_BULK_ACTION_DELETE, Labels: label, Limit: int32(n)}, as(tokenAcmeOps))
		done <- result{resp, err}
	}()
	// Every job but the held one is deleted while the lock is held.
	deadline := time.Now().Add(30 * time.Second)
	for h.count(`SELECT count(*) FROM jobs WHERE labels @> '{"team":"held"}' AND status = 'deleted'`) < n-1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs deleted while one was held, want every other", h.count(`SELECT count(*) FROM jobs WHERE labels @> '{"team":"held"}' AND status = 'deleted'`), n)
		}
		select {
		case r := <-done:
			t.Fatalf("the call returned while a job was held: %+v, %v", r.resp, r.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case r := <-done:
		t.Fatalf("the call returned while a job was held: %+v, %v", r.resp, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := tx.Commit(h.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.resp.GetMatched() != int64(n) || r.resp.GetChanged() != int64(n) || len(r.resp.GetRefused()) != 0 {
		t.Fatalf("matched %d, changed %d, refused %v; want %d changed", r.resp.GetMatched(), r.resp.GetChanged(), r.resp.GetRefused(), n)
	}
	got, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: held.GetId()}, as(tokenAcme))
	if err != nil || got.GetJob().GetStatus() != sundialv1.JobStatus_JOB_STATUS_DELETED || got.GetJob().GetVersion() != held.GetVersion()+1 {
		t.Fatalf("the held job after the call: %v version %d (%v)", got.GetJob().GetStatus(), got.GetJob().GetVersion(), err)
	}
	if c := h.count(`SELECT count(*) FROM job_audit WHERE action = 'delete' AND actor = 'acme/ops'`); c != n {
		t.Fatalf("%d delete audit rows, want one per job (%d)", c, n)
	}
}
