package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// fakeAudit is the AuditService side of the fake api: it records every
// request and answers two pages, each entry of the first kind asked for
// (a job without kinds) and of the subject asked for; actor "bad" is
// refused as the api refuses a bad field.
type fakeAudit struct {
	sundialv1.UnimplementedAuditServiceServer
	mu   sync.Mutex
	reqs []*sundialv1.ListAuditRequest
}

func (f *fakeAudit) ListAudit(_ context.Context, req *sundialv1.ListAuditRequest) (*sundialv1.ListAuditResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, proto.Clone(req).(*sundialv1.ListAuditRequest))
	if req.GetActor() == "bad" {
		st, _ := status.New(codes.InvalidArgument, "actor: nope").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "actor", Description: "is not an actor"}},
		})
		return nil, st.Err()
	}
	kind, subject := sundialv1.AuditKind_AUDIT_KIND_JOB, req.GetSubject()
	if len(req.GetKinds()) > 0 {
		kind = req.GetKinds()[0]
	}
	if subject == "" {
		subject = "s1"
	}
	if req.GetPageToken() == "" {
		return &sundialv1.ListAuditResponse{Entries: []*sundialv1.AuditTrailEntry{
			{Kind: kind, Subject: subject, Tenant: "acme", Actor: "acme/ops", Action: "pause", Version: 2, Time: timestamppb.New(fakeNow), Detail: `{"dropped_firings": 2}`},
		}, NextPageToken: "a2"}, nil
	}
	return &sundialv1.ListAuditResponse{Entries: []*sundialv1.AuditTrailEntry{
		{Kind: sundialv1.AuditKind_AUDIT_KIND_TOKEN, Subject: "t1", Tenant: "acme", Actor: "acme/ci", Action: "create", Time: timestamppb.New(fakeNow.Add(-time.Hour)), Detail: "{}"},
	}}, nil
}

// take returns the requests recorded since the previous take.
func (f *fakeAudit) take() []*sundialv1.ListAuditRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.reqs
	f.reqs = nil
	return out
}

// schedctl audit with every filter sends them all in one ListAudit
// request, and prints the kind and subject of each entry.
func TestAuditCommandFilters(t *testing.T) {
	f, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "audit", "--kind", "token,calendar", "--kind", "signing-key", "--actor", "acme/ci",
		"--since", "2h", "--until", "2026-11-22T11:30:00Z", "--page-size", "5", "--page-token", "p1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	reqs := f.audit.take()
	if len(reqs) != 1 {
		t.Fatalf("requests: %v", reqs)
	}
	r := reqs[0]
	want := []sundialv1.AuditKind{sundialv1.AuditKind_AUDIT_KIND_TOKEN, sundialv1.AuditKind_AUDIT_KIND_CALENDAR, sundialv1.AuditKind_AUDIT_KIND_SIGNING_KEY}
	if !slices.Equal(r.GetKinds(), want) || r.GetActor() != "acme/ci" || r.GetSubject() != "" || r.GetPageSize() != 5 || r.GetPageToken() != "p1" ||
		!r.GetStartTime().AsTime().Equal(fakeNow.Add(-2*time.Hour)) || !r.GetEndTime().AsTime().Equal(time.Date(2026, 11, 22, 11, 30, 0, 0, time.UTC)) {
		t.Fatalf("sent %v", r)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "TIME KIND SUBJECT ACTION VERSION ACTOR DETAIL" ||
		strings.Join(strings.Fields(lines[1]), " ") != "2026-11-22T11:00:00Z token t1 create - acme/ci -" || stderr != "" {
		t.Fatalf("table (the last page: no more named):\n%s%s", out, stderr)
	}
	code, out, stderr = run(t, addr, nil, "audit", "--kind", "job,token")
	if code != 0 || !strings.Contains(out, `2026-11-22T12:00:00Z  job   s1       pause   2        acme/ops  {"dropped_firings": 2}`) ||
		!strings.Contains(stderr, "more: --page-token a2") {
		t.Fatalf("first page: %d\n%s%s", code, out, stderr)
	}
	f.audit.take()

	// No filter: every trail, the whole trail with --all, as JSON.
	code, out, stderr = run(t, addr, nil, "audit", "--all", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	reqs = f.audit.take()
	if len(reqs) != 2 || len(reqs[0].GetKinds()) != 0 || reqs[0].GetPageSize() != 100 || reqs[1].GetPageToken() != "a2" {
		t.Fatalf("requests: %v", reqs)
	}
	var got struct {
		Entries []struct{ Kind, Subject, Action string } `json:"entries"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Entries) != 2 || got.Entries[1].Kind != "AUDIT_KIND_TOKEN" || got.Entries[1].Action != "create" {
		t.Fatalf("json (%v):\n%s", err, out)
	}
}

// schedctl audit JOB_ID still reads one job's trail, in the columns it
// always printed.
func TestAuditJobID(t *testing.T) {
	f, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "audit", "J1", "--all")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	reqs := f.audit.take()
	if len(reqs) != 2 || !slices.Equal(reqs[0].GetKinds(), []sundialv1.AuditKind{sundialv1.AuditKind_AUDIT_KIND_JOB}) || reqs[0].GetSubject() != "J1" ||
		reqs[1].GetPageToken() != "a2" || reqs[1].GetSubject() != "J1" {
		t.Fatalf("requests: %v", reqs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "TIME ACTION VERSION ACTOR DETAIL" ||
		!strings.Contains(lines[1], "pause") || !strings.Contains(lines[1], `{"dropped_firings": 2}`) || !strings.Contains(lines[2], "create") ||
		strings.Contains(out, "J1") || stderr != "" {
		t.Fatalf("table:\n%s%s", out, stderr)
	}
	if code, _, stderr = run(t, addr, nil, "audit", "J1", "--kind", "job"); code != 0 {
		t.Fatalf("JOB_ID with --kind job: %d %s", code, stderr)
	}
}

// calendar audit, signing-key audit and token audit are audit with the
// kind set.
func TestAuditAliases(t *testing.T) {
	f, addr := startFake(t)
	for _, c := range []struct {
		args    []string
		kind    sundialv1.AuditKind
		subject string
		head    string
	}{
		{[]string{"calendar audit", "us", "--page-size", "2"}, sundialv1.AuditKind_AUDIT_KIND_CALENDAR, "us", "TIME ACTION VERSION ACTOR DETAIL"},
		{[]string{"calendar audit"}, sundialv1.AuditKind_AUDIT_KIND_CALENDAR, "", "TIME CALENDAR ACTION VERSION ACTOR DETAIL"},
		{[]string{"signing-key audit", "--actor", "acme/ops"}, sundialv1.AuditKind_AUDIT_KIND_SIGNING_KEY, "", "TIME KEY_ID ACTION ACTOR DETAIL"},
		{[]string{"token audit", "--kind", "token"}, sundialv1.AuditKind_AUDIT_KIND_TOKEN, "", "TIME TOKEN ACTION ACTOR DETAIL"},
	} {
		code, out, stderr := run(t, addr, nil, c.args...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", c.args, code, stderr)
		}
		reqs := f.audit.take()
		if len(reqs) != 1 || !slices.Equal(reqs[0].GetKinds(), []sundialv1.AuditKind{c.kind}) || reqs[0].GetSubject() != c.subject {
			t.Fatalf("%q sent %v", c.args, reqs)
		}
		if head := strings.Join(strings.Fields(strings.SplitN(out, "\n", 2)[0]), " "); head != c.head {
			t.Fatalf("%q: header %q, want %q", c.args, head, c.head)
		}
	}
	for _, args := range [][]string{
		{"calendar audit", "a", "b"},
		{"signing-key audit", "extra"},
		{"token audit", "--kind", "job"},
		{"calendar audit", "us", "--subject", "eu"},
	} {
		if code, _, stderr := run(t, addr, nil, args...); code != 2 || !strings.Contains(stderr, "usage:") {
			t.Fatalf("%q: exit %d, want 2 with the usage: %s", args, code, stderr)
		}
	}
	if reqs := f.audit.take(); len(reqs) != 0 {
		t.Fatalf("bad command lines sent %v", reqs)
	}
}

// Contradictory or malformed flags are usage errors naming the flag, sent
// nowhere; a field the api refuses is printed with its name.
func TestAuditCommandErrors(t *testing.T) {
	f, addr := startFake(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "--kind", "jobs"}, "--kind"},
		{[]string{"audit", "--subject", "s1"}, "--subject"},
		{[]string{"audit", "--kind", "job,token", "--subject", "s1"}, "--subject"},
		{[]string{"audit", "J1", "--kind", "token"}, "--kind"},
		{[]string{"audit", "J1", "--subject", "J2"}, "not both"},
		{[]string{"audit", "J1", "J2"}, "unexpected arguments"},
		{[]string{"audit", "--since", "yesterday"}, "--since"},
		{[]string{"audit", "--since", "1h", "--until", "2h"}, "--until"},
		{[]string{"audit", "--page-size", "-1"}, "--page-size"},
	} {
		code, _, stderr := run(t, addr, nil, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, want 2 naming %s: %s", c.args, code, c.want, stderr)
		}
	}
	if reqs := f.audit.take(); len(reqs) != 0 {
		t.Fatalf("bad command lines sent %v", reqs)
	}
	code, _, stderr := run(t, addr, nil, "audit", "--actor", "bad")
	if code != 1 || !strings.Contains(stderr, "InvalidArgument") || !strings.Contains(stderr, "actor: is not an actor") {
		t.Fatalf("refused field: %d %s", code, stderr)
	}
}
