package main

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// fakeDLQ records the DeadLetterService requests.
type fakeDLQ struct {
	sundialv1.UnimplementedDeadLetterServiceServer
	mu       sync.Mutex
	lists    []*sundialv1.ListDeadLettersRequest
	redrives []*sundialv1.RedriveDeadLettersRequest
}

func deadLetterFixture() *sundialv1.DeadLetter {
	return &sundialv1.DeadLetter{
		Firing: &sundialv1.Firing{ExecutionId: "E1", JobId: "J1", JobVersion: 3, Attempt: 3, FirstAttempt: 1,
			ScheduledTime: timestamppb.New(fakeNow.Add(-time.Hour)), Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE,
			Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://x.example/", Method: "POST",
				Headers: map[string]string{"Authorization": "Bearer {{secret:tok}}"}}}}},
		LastError: "HTTP 503", ErrorClass: "http_5xx", HttpStatus: 503, Attempts: 3, DeadTime: timestamppb.New(fakeNow.Add(-30 * time.Minute)),
	}
}

func (f *fakeDLQ) ListDeadLetters(_ context.Context, req *sundialv1.ListDeadLettersRequest) (*sundialv1.ListDeadLettersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists = append(f.lists, req)
	if req.GetPageToken() == "" {
		return &sundialv1.ListDeadLettersResponse{DeadLetters: []*sundialv1.DeadLetter{deadLetterFixture()}, NextPageToken: "p2"}, nil
	}
	return &sundialv1.ListDeadLettersResponse{}, nil
}

func (f *fakeDLQ) GetDeadLetter(_ context.Context, req *sundialv1.GetDeadLetterRequest) (*sundialv1.GetDeadLetterResponse, error) {
	return &sundialv1.GetDeadLetterResponse{DeadLetter: deadLetterFixture()}, nil
}

func (f *fakeDLQ) RedriveDeadLetters(_ context.Context, req *sundialv1.RedriveDeadLettersRequest) (*sundialv1.RedriveDeadLettersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.redrives = append(f.redrives, req)
	return &sundialv1.RedriveDeadLettersResponse{ExecutionIds: []string{"E1", "E2"}, Count: 2, DryRun: req.GetDryRun(),
		LastReleaseTime: timestamppb.New(fakeNow.Add(time.Second))}, nil
}

func (f *fakeAPI) BackfillJob(_ context.Context, req *sundialv1.BackfillJobRequest) (*sundialv1.BackfillJobResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backfill = req
	slots := []*timestamppb.Timestamp{req.GetStartTime(), req.GetEndTime()}
	return &sundialv1.BackfillJobResponse{Slots: slots, ExecutionIds: []string{"X1", "X2"}, Count: 2, DryRun: req.GetDryRun(),
		LastReleaseTime: timestamppb.New(fakeNow.Add(100 * time.Millisecond))}, nil
}

func TestDLQList(t *testing.T) {
	f, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "dlq list", "--job", "J1", "--since", "24h", "--until", "2026-11-22T11:00:00Z",
		"--class", "http_5xx", "--include-redriven", "--all")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if len(f.dlq.lists) != 2 || f.dlq.lists[1].GetPageToken() != "p2" {
		t.Fatalf("requests: %v", f.dlq.lists)
	}
	flt := f.dlq.lists[0].GetFilter()
	if flt.GetJobId() != "J1" || !flt.GetSince().AsTime().Equal(fakeNow.Add(-24*time.Hour)) ||
		!flt.GetUntil().AsTime().Equal(time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC)) || flt.GetErrorClass() != "http_5xx" || !flt.GetIncludeRedriven() {
		t.Fatalf("filter: %v", flt)
	}
	if !strings.Contains(out, "E1") || !strings.Contains(out, "http_5xx") || !strings.Contains(out, "503") {
		t.Fatalf("table:\n%s", out)
	}
	// No filter flags: no filter.
	if code, _, _ := run(t, addr, nil, "dlq list"); code != 0 || f.dlq.lists[2].GetFilter() != nil {
		t.Fatalf("unfiltered list: %d %v", code, f.dlq.lists[2])
	}
	if code, _, _ := run(t, addr, nil, "dlq list", "--since", "yesterday"); code != 2 {
		t.Fatalf("bad --since: exit %d", code)
	}
}

func TestDLQShow(t *testing.T) {
	_, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "dlq show", "E1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"E1", "J1 (version 3)", "http_5xx", "HTTP 503", "{{secret:tok}}", "never"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

func TestDLQRedrive(t *testing.T) {
	f, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "dlq redrive", "E1", "E2", "--dry-run", "--rate", "2.5", "--limit", "10")
	if code != 0 || !strings.Contains(out, "E2") || !strings.Contains(stderr, "dry run: 2 dead letter(s) would be re-driven") {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
	r := f.dlq.redrives[0]
	if !slices.Equal(r.GetExecutionIds(), []string{"E1", "E2"}) || !r.GetDryRun() || r.GetRatePerSecond() != 2.5 || r.GetLimit() != 10 || r.GetFilter() != nil {
		t.Fatalf("request: %v", r)
	}
	if code, _, stderr := run(t, addr, nil, "dlq redrive", "--job", "J1", "--class", "timeout"); code != 0 || !strings.Contains(stderr, "re-drove 2") {
		t.Fatalf("by filter: exit %d %s", code, stderr)
	}
	if r := f.dlq.redrives[1]; r.GetFilter().GetJobId() != "J1" || r.GetFilter().GetErrorClass() != "timeout" || len(r.GetExecutionIds()) != 0 {
		t.Fatalf("filter request: %v", r)
	}
	if code, _, _ := run(t, addr, nil, "dlq redrive", "--all"); code != 0 || f.dlq.redrives[2].GetFilter() == nil {
		t.Fatalf("--all: exit %d %v", code, f.dlq.redrives[2])
	}
	for name, args := range map[string][]string{
		"nothing":         {"dlq redrive"},
		"ids and filter":  {"dlq redrive", "E1", "--job", "J1"},
		"ids and all":     {"dlq redrive", "E1", "--all"},
		"filter and all":  {"dlq redrive", "--job", "J1", "--all"},
		"include re-driv": {"dlq redrive", "--include-redriven"},
	} {
		if code, _, stderr := run(t, addr, nil, args...); code != 2 {
			t.Errorf("%s: exit %d, want 2 (%s)", name, code, stderr)
		}
	}
	if len(f.dlq.redrives) != 3 {
		t.Fatalf("refused command lines reached the api: %d requests", len(f.dlq.redrives))
	}
}

func TestBackfill(t *testing.T) {
	f, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "backfill", "J1", "--from", "6h", "--to", "2026-11-22T11:00:00Z", "--dry-run", "--rate", "3", "--max-slots", "50")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	b := f.backfill
	if b.GetId() != "J1" || !b.GetStartTime().AsTime().Equal(fakeNow.Add(-6*time.Hour)) || !b.GetEndTime().AsTime().Equal(time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC)) ||
		!b.GetDryRun() || b.GetRatePerSecond() != 3 || b.GetMaxSlots() != 50 {
		t.Fatalf("request: %v", b)
	}
	if !strings.Contains(out, "2026-11-22T06:00:00Z") || !strings.Contains(out, "X2") || !strings.Contains(stderr, "dry run: 2 slot(s)") {
		t.Fatalf("dry-run output:\n%s\n%s", out, stderr)
	}
	code, out, _ = run(t, addr, nil, "backfill", "J1", "--from", "2h", "--to", "1h")
	if code != 0 || !strings.Contains(out, "2 firing(s) staged for slots 2026-11-22T10:00:00Z .. 2026-11-22T11:00:00Z") {
		t.Fatalf("staged: exit %d\n%s", code, out)
	}
	for name, args := range map[string][]string{
		"no range": {"backfill", "J1"},
		"no id":    {"backfill", "--from", "2h", "--to", "1h"},
		"bad from": {"backfill", "J1", "--from", "monday", "--to", "1h"},
	} {
		if code, _, stderr := run(t, addr, nil, args...); code != 2 {
			t.Errorf("%s: exit %d, want 2 (%s)", name, code, stderr)
		}
	}
}

func TestSecretHeaderFlag(t *testing.T) {
	f, addr := startFake(t)
	code, _, stderr := run(t, addr, nil, "create", "--cron", "@hourly", "--url", "https://x.example/",
		"--secret-header", "X-Api-Key=billing_key", "--header", "Authorization=Bearer {{secret:tok}}", "--callback-url", "https://cb.example/")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	h := f.create.GetJob().GetTarget().GetHttp().GetHeaders()
	if h["X-Api-Key"] != "{{secret:billing_key}}" || h["Authorization"] != "Bearer {{secret:tok}}" || f.create.GetJob().GetCallbackUrl() != "https://cb.example/" {
		t.Fatalf("headers %v callback %q", h, f.create.GetJob().GetCallbackUrl())
	}
	code, _, _ = run(t, addr, nil, "update", "J1", "--secret-header", "X-Api-Key=rotated")
	if code != 0 || !slices.Equal(f.update.GetUpdateMask().GetPaths(), []string{"target.http.headers"}) {
		t.Fatalf("update: exit %d mask %v", code, f.update.GetUpdateMask().GetPaths())
	}
	if code, _, _ := run(t, addr, nil, "create", "--url", "https://x.example/", "--cron", "@hourly", "--header", "A=1", "--secret-header", "A=s"); code != 2 {
		t.Fatalf("same header twice: exit %d", code)
	}
}

func TestCommandGroups(t *testing.T) {
	now := fakeNow
	if code, _, stderr := cli(t, now, "dlq"); code != 2 || !strings.Contains(stderr, "dlq redrive") {
		t.Fatalf("bare group: exit %d\n%s", code, stderr)
	}
	if code, out, _ := cli(t, now, "dlq", "-h"); code != 0 || !strings.Contains(out, "dlq list") {
		t.Fatalf("group help: exit %d\n%s", code, out)
	}
	if code, _, stderr := cli(t, now, "dlq", "purge"); code != 2 || !strings.Contains(stderr, `unknown command "dlq purge"`) {
		t.Fatalf("unknown subcommand: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := cli(t, now, "help", "dlq", "redrive"); code != 0 || !strings.Contains(stderr, "-rate float") {
		t.Fatalf("help dlq redrive: exit %d\n%s", code, stderr)
	}
	if code, out, _ := cli(t, now, "help"); code != 0 || !strings.Contains(out, "dlq redrive") || !strings.Contains(out, "backfill") || !strings.Contains(out, "audit") {
		t.Fatalf("help:\n%s", out)
	}
}
