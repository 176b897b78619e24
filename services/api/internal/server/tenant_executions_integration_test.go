//go:build integration

package server

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// ListTenantExecutions over gRPC against a real ledger: the caller's
// tenant's attempts of every job, newest first, in the range, of the
// statuses asked for, in pages; another tenant's never.
func TestIntegrationListTenantExecutions(t *testing.T) {
	ctx := context.Background()
	keyspace := testinfra.CassandraKeyspace(t)
	session, err := ledger.Connect(ledger.ConnectConfig{Hosts: testinfra.CassandraHosts(t), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("cassandra: %v", err)
	}
	t.Cleanup(session.Close)
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := ledger.Migrate(mctx, session, keyspace, ""); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, ledger.NewReader(session, keyspace))
	w := ledger.NewWriter(session, keyspace)
	slot := time.Now().Add(-3 * time.Hour).Truncate(time.Minute).UTC()
	record := func(tenant string, job uuid.UUID, at time.Time, st sundialv1.ExecutionStatus) {
		t.Helper()
		err := w.Record(ctx, &sundialv1.ExecutionAttempt{
			ExecutionId: firing.ExecutionID(job, at).String(), JobId: job.String(), Tenant: tenant, Attempt: 1, FenceToken: 7,
			Status: st, ScheduledTime: timestamppb.New(at), FireTime: timestamppb.New(at), JobVersion: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	a, b, g := uuid.New(), uuid.New(), uuid.New()
	for i := range 6 {
		at := slot.Add(time.Duration(i) * 20 * time.Minute)
		record("acme", a, at, sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED)
		st := sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED
		if i%2 == 1 {
			st = sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED
		}
		record("acme", b, at.Add(time.Second), st)
		record("globex", g, at, sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED)
	}

	// The default range (the last 24 hours) holds all twelve of acme's.
	var all []*sundialv1.ExecutionAttempt
	req := &sundialv1.ListTenantExecutionsRequest{PageSize: 5}
	for {
		resp, err := h.client.ListTenantExecutions(h.ctx, req, as(tokenAcme))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, resp.GetAttempts()...)
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if len(all) != 12 {
		t.Fatalf("%d attempts, want 12", len(all))
	}
	for i, at := range all {
		if at.GetTenant() != "acme" || (i > 0 && at.GetScheduledTime().AsTime().After(all[i-1].GetScheduledTime().AsTime())) {
			t.Fatalf("attempt %d: %v", i, at)
		}
	}
	if all[0].GetJobId() != b.String() {
		t.Fatalf("newest first: %v", all[0])
	}

	// Failed only, in the first hour.
	resp, err := h.client.ListTenantExecutions(h.ctx, &sundialv1.ListTenantExecutionsRequest{
		StartTime: timestamppb.New(slot), EndTime: timestamppb.New(slot.Add(time.Hour)),
		Statuses: []sundialv1.ExecutionStatus{sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED},
	}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetAttempts()); n != 1 || resp.GetAttempts()[0].GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED ||
		!resp.GetAttempts()[0].GetScheduledTime().AsTime().Equal(slot.Add(20*time.Minute+time.Second)) {
		t.Fatalf("failed in the first hour: %v", resp.GetAttempts())
	}

	// Bad input names its field.
	for _, c := range []struct {
		req   *sundialv1.ListTenantExecutionsRequest
		field string
	}{
		{&sundialv1.ListTenantExecutionsRequest{StartTime: timestamppb.New(slot), EndTime: timestamppb.New(slot)}, "start_time"},
		{&sundialv1.ListTenantExecutionsRequest{StartTime: timestamppb.New(slot.Add(-40 * 24 * time.Hour)), EndTime: timestamppb.New(slot)}, "start_time"},
		{&sundialv1.ListTenantExecutionsRequest{Statuses: []sundialv1.ExecutionStatus{0}}, "statuses"},
		{&sundialv1.ListTenantExecutionsRequest{PageToken: "bogus"}, "page_token"},
	} {
		_, err := h.client.ListTenantExecutions(h.ctx, c.req, as(tokenAcme))
		if _, ok := violations(t, err)[c.field]; !ok {
			t.Errorf("%v: %v, want InvalidArgument on %s", c.req, err, c.field)
		}
	}
}

func TestIntegrationTenantExecutionsWithoutLedgerIsUnavailable(t *testing.T) {
	h := newHarness(t, nil)
	_, err := h.client.ListTenantExecutions(h.ctx, &sundialv1.ListTenantExecutionsRequest{}, as(tokenAcme))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("without a ledger: %v", err)
	}
}
