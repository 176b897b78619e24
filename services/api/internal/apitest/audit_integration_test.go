//go:build integration

package apitest_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// listAudit reads every page of ListAudit for req, page by page.
func listAudit(t *testing.T, ctx context.Context, c sundialv1.AuditServiceClient, req *sundialv1.ListAuditRequest) []*sundialv1.AuditTrailEntry {
	t.Helper()
	var out []*sundialv1.AuditTrailEntry
	for {
		resp, err := c.ListAudit(ctx, req)
		if err != nil {
			t.Fatalf("ListAudit(%v): %v", req, err)
		}
		out = append(out, resp.GetEntries()...)
		if resp.GetNextPageToken() == "" {
			return out
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

func trailKinds(es []*sundialv1.AuditTrailEntry) []string {
	var out []string
	for _, e := range es {
		k := e.GetKind().String()
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// wantInvalid checks err is InvalidArgument naming field.
func wantInvalid(t *testing.T, what string, err error, field string) {
	t.Helper()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), field) {
		t.Fatalf("%s: want InvalidArgument naming %s, got %v", what, field, err)
	}
}

// One audit read over every trail on the real api and Postgres: a
// tenant's job, token, signing-key and calendar changes come back merged,
// newest first, and nothing of another tenant's; kind, actor, subject and
// time filter; pages of one cursor neither repeat nor skip; bad filters
// are InvalidArgument naming the field; a read-only token reads every
// trail but the token trail (PermissionDenied when it names it), as in the
// console; an operator reads a tenant it names; the HTTP route serves the
// same; and the deprecated ListJobAudit still answers beside it.
func TestIntegrationListAudit(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	acmeConn := dial(t, api, apitest.TokenAcme)
	acme := sundialv1.NewAuditServiceClient(acmeConn)
	acmeJobs := sundialv1.NewJobServiceClient(acmeConn)
	toks := sundialv1.NewTokenServiceClient(acmeConn)
	start := time.Now().Add(-time.Second)

	// One change in every trail of acme, and one of globex.
	job, err := acmeJobs.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: cronJob("audited")})
	if err != nil {
		t.Fatal(err)
	}
	jobID := job.GetJob().GetId()
	if _, err := acmeJobs.PauseJob(ctx, &sundialv1.PauseJobRequest{Id: jobID}); err != nil {
		t.Fatal(err)
	}
	_, roSecret := createToken(t, toks, "viewer", sundialv1.Role_ROLE_TENANT_READ_ONLY, 0)
	_, ciSecret := createToken(t, toks, "ci", sundialv1.Role_ROLE_TENANT_ADMIN, 0)
	if _, err := sundialv1.NewSigningKeyServiceClient(acmeConn).CreateSigningKey(ctx, &sundialv1.CreateSigningKeyRequest{}); err != nil {
		t.Fatal(err)
	}
	ciConn := dial(t, api, ciSecret)
	if _, err := sundialv1.NewCalendarServiceClient(ciConn).CreateCalendar(ctx, &sundialv1.CreateCalendarRequest{Calendar: &sundialv1.Calendar{Name: "ops"}}); err != nil {
		t.Fatal(err)
	}
	ciJob, err := sundialv1.NewJobServiceClient(ciConn).CreateJob(ctx, &sundialv1.CreateJobRequest{Job: cronJob("by-ci")})
	if err != nil {
		t.Fatal(err)
	}
	globexConn := dial(t, api, apitest.TokenGlobex)
	globexJob, err := sundialv1.NewJobServiceClient(globexConn).CreateJob(ctx, &sundialv1.CreateJobRequest{Job: cronJob("theirs")})
	if err != nil {
		t.Fatal(err)
	}

	all := listAudit(t, ctx, acme, &sundialv1.ListAuditRequest{})
	// The first job made the tenant's signing key, and the explicit
	// create showed it: two signing-key entries.
	if len(all) != 8 {
		t.Fatalf("acme's trails: %d entries, want 8 (job create, key made for it, pause, 2 tokens, key shown, calendar, ci's job): %v", len(all), all)
	}
	if got := trailKinds(all); !slices.Equal(got, []string{"AUDIT_KIND_CALENDAR", "AUDIT_KIND_JOB", "AUDIT_KIND_SIGNING_KEY", "AUDIT_KIND_TOKEN"}) {
		t.Fatalf("kinds: %v", got)
	}
	for i, e := range all {
		if e.GetTenant() != "acme" || e.GetSubject() == globexJob.GetJob().GetId() {
			t.Fatalf("entry %d is not acme's: %v", i, e)
		}
		if i > 0 && e.GetTime().AsTime().After(all[i-1].GetTime().AsTime()) {
			t.Fatalf("not newest first at %d: %v after %v", i, e, all[i-1])
		}
	}
	if e := all[0]; e.GetKind() != sundialv1.AuditKind_AUDIT_KIND_JOB || e.GetSubject() != ciJob.GetJob().GetId() || e.GetAction() != "create" || e.GetActor() != "acme/ci" || e.GetVersion() != 1 {
		t.Fatalf("newest entry: %v", e)
	}

	// Pages of two: the same entries in the same order, none twice.
	var paged []*sundialv1.AuditTrailEntry
	req := &sundialv1.ListAuditRequest{PageSize: 2}
	pages := 0
	for {
		resp, err := acme.ListAudit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		paged = append(paged, resp.GetEntries()...)
		if resp.GetNextPageToken() == "" {
			break
		}
		// A token is bound to its filters and tenant.
		_, err = acme.ListAudit(ctx, &sundialv1.ListAuditRequest{PageSize: 2, Actor: "acme/ci", PageToken: resp.GetNextPageToken()})
		wantInvalid(t, "token of other filters", err, "page_token")
		_, err = acme.ListAudit(ctx, &sundialv1.ListAuditRequest{PageSize: 2, Action: "pause", PageToken: resp.GetNextPageToken()})
		wantInvalid(t, "token of another action", err, "page_token")
		req.PageToken = resp.GetNextPageToken()
	}
	if pages != 4 || len(paged) != len(all) {
		t.Fatalf("%d pages, %d entries; want 4 pages of %d", pages, len(paged), len(all))
	}
	for i := range all {
		if paged[i].GetKind() != all[i].GetKind() || paged[i].GetSubject() != all[i].GetSubject() || paged[i].GetAction() != all[i].GetAction() {
			t.Fatalf("paged entry %d: %v, unpaged %v", i, paged[i], all[i])
		}
	}

	// Filters.
	byCI := listAudit(t, ctx, acme, &sundialv1.ListAuditRequest{Actor: "acme/ci"})
	if len(byCI) != 2 || trailKinds(byCI)[0] != "AUDIT_KIND_CALENDAR" || byCI[0].GetActor() != "acme/ci" || byCI[1].GetActor() != "acme/ci" {
		t.Fatalf("actor acme/ci: %v", byCI)
	}
	tokensOnly := listAudit(t, ctx, acme, &sundialv1.ListAuditRequest{Kinds: []sundialv1.AuditKind{sundialv1.AuditKind_AUDIT_KIND_TOKEN}})
	if len(tokensOnly) != 2 || trailKinds(tokensOnly)[0] != "AUDIT_KIND_TOKEN" || len(trailKinds(tokensOnly)) != 1 {
		t.Fatalf("token trail: %v", tokensOnly)
	}
	oneJob := listAudit(t, ctx, acme, &sundialv1.ListAuditRequest{Kinds: []sundialv1.AuditKind{sundialv1.AuditKind_AUDIT_KIND_JOB}, Subject: strings.ToUpper(jobID)})
	if len(oneJob) != 2 || oneJob[0].GetAction() != "pause" || oneJob[1].GetAction() != "create" || oneJob[0].GetSubject() != jobID {
		t.Fatalf("one job's trail: %v", oneJob)
	}
	pauses := listAudit(t, ctx, acme, &sundialv1.ListAuditRequest{Action: "pause"})
	if len(pauses) != 1 || pauses[0].GetAction() != "pause" || pauses[0].GetSubject() != jobID {
		t.Fatalf("action pause: %v", pauses)
	}
	if got := listAudit(t, ctx, acme, &sundialv1.ListAuditRequest{Action: "purge"}); len(got) != 0 {
		t.Fatalf("action purge (none recorded): %v", got)
	}
	oneCal := listAudit(t, ctx, acme, &sundialv1.ListAuditRequest{Kinds: []sundialv1.AuditKind{sundialv1.AuditKind_AUDIT_KIND_CALENDAR}, Subject: "ops"})
	if len(oneCal) != 1 || oneCal[0].GetSubject() != "ops" {
		t.Fatalf("one calendar's trail: %v", oneCal)
	}
	if got := listAudit(t, ctx, acme, &sundialv1.ListAuditRequest{StartTime: timestamppb.New(time.Now().Add(time.Hour))}); len(got) != 0 {
		t.Fatalf("since an hour ahead: %v", got)
	}
	if got := listAudit(t, ctx, acme, &sundialv1.ListAuditRequest{StartTime: timestamppb.New(start), EndTime: timestamppb.New(all[0].GetTime().AsTime())}); len(got) != len(all)-1 {
		t.Fatalf("until the newest entry (exclusive): %d entries, want %d", len(got), len(all)-1)
	}
	// The deprecated per-trail call reads the same trail.
	old, err := acmeJobs.ListJobAudit(ctx, &sundialv1.ListJobAuditRequest{Id: jobID})
	if err != nil || len(old.GetEntries()) != 2 || old.GetEntries()[0].GetAction() != "pause" {
		t.Fatalf("ListJobAudit: %v %v", old, err)
	}

	// Bad filters name their field and read nothing.
	jobKind := []sundialv1.AuditKind{sundialv1.AuditKind_AUDIT_KIND_JOB}
	_, err = acme.ListAudit(ctx, &sundialv1.ListAuditRequest{Kinds: []sundialv1.AuditKind{sundialv1.AuditKind_AUDIT_KIND_UNSPECIFIED}})
	wantInvalid(t, "unspecified kind", err, "kinds")
	_, err = acme.ListAudit(ctx, &sundialv1.ListAuditRequest{Kinds: []sundialv1.AuditKind{42}})
	wantInvalid(t, "unknown kind", err, "kinds")
	_, err = acme.ListAudit(ctx, &sundialv1.ListAuditRequest{Subject: jobID})
	wantInvalid(t, "subject without a kind", err, "subject")
	_, err = acme.ListAudit(ctx, &sundialv1.ListAuditRequest{Kinds: jobKind, Subject: "nightly"})
	wantInvalid(t, "job subject not an id", err, "subject")
	_, err = acme.ListAudit(ctx, &sundialv1.ListAuditRequest{StartTime: timestamppb.New(start), EndTime: timestamppb.New(start)})
	wantInvalid(t, "empty range", err, "end_time")
	_, err = acme.ListAudit(ctx, &sundialv1.ListAuditRequest{StartTime: &timestamppb.Timestamp{Seconds: 1, Nanos: -1}})
	wantInvalid(t, "bad timestamp", err, "start_time")
	_, err = acme.ListAudit(ctx, &sundialv1.ListAuditRequest{PageSize: -1})
	wantInvalid(t, "negative page size", err, "page_size")
	_, err = acme.ListAudit(ctx, &sundialv1.ListAuditRequest{PageToken: "bm90LWEtdG9rZW4"})
	wantInvalid(t, "forged token", err, "page_token")
	_, err = acme.ListAudit(ctx, &sundialv1.ListAuditRequest{Actor: strings.Repeat("a", 600)})
	wantInvalid(t, "long actor", err, "actor")
	_, err = acme.ListAudit(ctx, &sundialv1.ListAuditRequest{Action: "Pause; DROP"})
	wantInvalid(t, "not an action word", err, "action")

	// Another tenant's job: NotFound, as GetJob says; no trail leaks.
	_, err = acme.ListAudit(ctx, &sundialv1.ListAuditRequest{Kinds: jobKind, Subject: globexJob.GetJob().GetId()})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("globex's job through acme: %v", err)
	}
	globex := sundialv1.NewAuditServiceClient(globexConn)
	theirs := listAudit(t, ctx, globex, &sundialv1.ListAuditRequest{})
	if len(theirs) != 2 || theirs[0].GetTenant() != "globex" || theirs[1].GetTenant() != "globex" {
		t.Fatalf("globex's trails: %v", theirs)
	}
	if _, err := globex.ListAudit(metadata.AppendToOutgoingContext(ctx, auth.TenantHeader, "acme"), &sundialv1.ListAuditRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("globex naming acme: %v", err)
	}

	// Roles: read-only reads every trail but the tokens'.
	ro := sundialv1.NewAuditServiceClient(dial(t, api, roSecret))
	roAll := listAudit(t, ctx, ro, &sundialv1.ListAuditRequest{})
	if got := trailKinds(roAll); !slices.Equal(got, []string{"AUDIT_KIND_CALENDAR", "AUDIT_KIND_JOB", "AUDIT_KIND_SIGNING_KEY"}) || len(roAll) != len(all)-2 {
		t.Fatalf("read-only's view: %v", roAll)
	}
	_, err = ro.ListAudit(ctx, &sundialv1.ListAuditRequest{Kinds: []sundialv1.AuditKind{sundialv1.AuditKind_AUDIT_KIND_TOKEN}})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "role read-only may not read the token trail") {
		t.Fatalf("read-only asking for the token trail: %v", err)
	}
	// An operator reads the tenant it names, the token trail included.
	op := sundialv1.NewAuditServiceClient(dial(t, api, apitest.TokenOperator))
	opAll := listAudit(t, metadata.AppendToOutgoingContext(ctx, auth.TenantHeader, "acme"), op, &sundialv1.ListAuditRequest{})
	if len(opAll) != len(all) || opAll[0].GetTenant() != "acme" {
		t.Fatalf("operator's view of acme: %d entries", len(opAll))
	}

	// Over HTTP: the same read, and the field named in a 400.
	code, _, body := post(t, api, "/v1/audit/entries?kinds=AUDIT_KIND_CALENDAR&subject=ops", apitest.TokenAcme, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/audit/entries: %d %v", code, body)
	}
	entries, _ := body["entries"].([]any)
	if len(entries) != 1 || entries[0].(map[string]any)["subject"] != "ops" || entries[0].(map[string]any)["kind"] != "AUDIT_KIND_CALENDAR" {
		t.Fatalf("GET /v1/audit/entries: %v", body)
	}
	code, _, body = post(t, api, "/v1/audit/entries?subject=ops", apitest.TokenAcme, nil)
	if code != http.StatusBadRequest || !strings.Contains(body["message"].(string), "subject") {
		t.Fatalf("GET /v1/audit/entries without a kind: %d %v", code, body)
	}
}
