package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// BulkJobAction of the fake api: 2,500 jobs match, the first 20 already in
// the state asked for, one refused; it pages by req.Limit as the api does.
func (f *fakeAPI) BulkJobAction(_ context.Context, req *sundialv1.BulkJobActionRequest) (*sundialv1.BulkJobActionResponse, error) {
	f.record(fmt.Sprintf("bulk %s dry=%v status=%s labels=%v name=%q after=%s before=%s limit=%d token=%q",
		strings.ToLower(strings.TrimPrefix(req.GetAction().String(), "BULK_ACTION_")), req.GetDryRun(), firing.JobStatusWord(req.GetStatus()),
		req.GetLabels(), req.GetNameContains(), instant(req.GetNextFireAfter()), instant(req.GetNextFireBefore()), req.GetLimit(), req.GetPageToken()))
	if req.GetDryRun() {
		return &sundialv1.BulkJobActionResponse{Matched: 2500, Sample: []*sundialv1.Job{
			fakeJob("J1", sundialv1.JobStatus_JOB_STATUS_ACTIVE, 2, nil), fakeJob("J2", sundialv1.JobStatus_JOB_STATUS_ACTIVE, 5, nil)}}, nil
	}
	done, _ := strconv.Atoi(req.GetPageToken())
	n := min(2500-done, int(req.GetLimit()))
	resp := &sundialv1.BulkJobActionResponse{Matched: int64(n), Changed: int64(n)}
	if done == 0 {
		resp.Changed -= 20
	}
	if done+n < 2500 {
		resp.NextPageToken = strconv.Itoa(done + n)
	} else {
		resp.Changed--
		resp.Refused = []*sundialv1.BulkJobRefusal{{Id: "J9", Name: "gone", Reason: "job is deleted; only an active job can be paused"}}
	}
	return resp, nil
}

// Without --yes the command counts, shows and stops, non-zero; with it,
// it calls page after page until none are left and sums them; the filter
// flags reach the request.
func TestBulk(t *testing.T) {
	f, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "bulk pause", "--label", "team=billing", "--status", "active", "--name", "exp",
		"--next-fire-after", "1h", "--next-fire-before", "2026-11-23T00:00:00Z")
	if code != 1 || !strings.Contains(out, "2500 job(s) match; the first 2:\n  J1  active  nightly\n") ||
		!strings.Contains(stderr, "nothing changed: add --yes to pause them") {
		t.Fatalf("without --yes: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, _ := run(t, addr, nil, "bulk delete", "--label", "team=billing", "--dry-run"); code != 0 || !strings.HasPrefix(out, "2500 job(s) match") {
		t.Fatalf("--dry-run: exit %d\n%s", code, out)
	}
	code, out, stderr = run(t, addr, nil, "bulk pause", "--label", "team=billing", "--yes")
	if code != 0 || out != "Paused 2479 job(s); 20 already so; 1 refused\n  refused J9  gone: job is deleted; only an active job can be paused\n" ||
		stderr != "Paused 980 of 1000 so far…\nPaused 1980 of 2000 so far…\n" {
		t.Fatalf("--yes: exit %d\nstdout %q\nstderr %q", code, out, stderr)
	}
	code, out, _ = run(t, addr, nil, "bulk resume", "--status", "paused", "--yes", "-o", "json")
	var sum struct {
		Matched string `json:"matched"`
		Changed string `json:"changed"`
	}
	if err := json.Unmarshal([]byte(out), &sum); code != 0 || err != nil || sum.Matched != "2500" || sum.Changed != "2479" {
		t.Fatalf("-o json: exit %d %v\n%s", code, err, out)
	}
	for _, args := range [][]string{{"bulk pause", "J1"}, {"bulk pause", "--status", "sleeping"}, {"bulk pause", "--next-fire-before", "soon"}} {
		if code, _, _ := run(t, addr, nil, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	c := f.calls()
	c.mu.Lock()
	defer c.mu.Unlock()
	want := []string{
		`bulk pause dry=true status=active labels=map[team:billing] name="exp" after=2026-11-22T13:00:00Z before=2026-11-23T00:00:00Z limit=0 token=""`,
		`bulk delete dry=true status=unspecified labels=map[team:billing] name="" after=- before=- limit=0 token=""`,
		`bulk pause dry=true status=unspecified labels=map[team:billing] name="" after=- before=- limit=0 token=""`,
		`bulk pause dry=false status=unspecified labels=map[team:billing] name="" after=- before=- limit=1000 token=""`,
		`bulk pause dry=false status=unspecified labels=map[team:billing] name="" after=- before=- limit=1000 token="1000"`,
		`bulk pause dry=false status=unspecified labels=map[team:billing] name="" after=- before=- limit=1000 token="2000"`,
	}
	if got := c.ids[:len(want)]; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
