package server

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestTenantExecutionsQueryDefaultsAndBounds(t *testing.T) {
	now := time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)
	q, err := tenantExecutionsQuery("acme", &sundialv1.ListTenantExecutionsRequest{}, now)
	if err != nil {
		t.Fatal(err)
	}
	if !q.To.Equal(now.Add(time.Hour)) || !q.From.Equal(now.Add(-23*time.Hour)) || q.PageSize != defaultPageSize || q.Tenant != "acme" {
		t.Fatalf("defaults: %+v", q)
	}
	q, err = tenantExecutionsQuery("acme", &sundialv1.ListTenantExecutionsRequest{EndTime: timestamppb.New(now), PageSize: 5000}, now)
	if err != nil || !q.From.Equal(now.Add(-24*time.Hour)) || q.PageSize != maxPageSize {
		t.Fatalf("end only: %+v %v", q, err)
	}
	st := []sundialv1.ExecutionStatus{sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED, sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD}
	q, err = tenantExecutionsQuery("acme", &sundialv1.ListTenantExecutionsRequest{
		StartTime: timestamppb.New(now.Add(-31 * 24 * time.Hour)), EndTime: timestamppb.New(now), Statuses: st, PageToken: "tok",
	}, now)
	if err != nil || len(q.Statuses) != 2 || q.PageToken != "tok" {
		t.Fatalf("31 days: %+v %v", q, err)
	}
	for name, c := range map[string]struct {
		req   *sundialv1.ListTenantExecutionsRequest
		field string
	}{
		"empty range":    {&sundialv1.ListTenantExecutionsRequest{StartTime: timestamppb.New(now), EndTime: timestamppb.New(now)}, "start_time"},
		"start after":    {&sundialv1.ListTenantExecutionsRequest{StartTime: timestamppb.New(now.Add(2 * time.Hour))}, "start_time"},
		"32 days":        {&sundialv1.ListTenantExecutionsRequest{StartTime: timestamppb.New(now.Add(-32 * 24 * time.Hour)), EndTime: timestamppb.New(now)}, "start_time"},
		"bad end":        {&sundialv1.ListTenantExecutionsRequest{EndTime: &timestamppb.Timestamp{Nanos: -1}}, "end_time"},
		"unspecified":    {&sundialv1.ListTenantExecutionsRequest{Statuses: []sundialv1.ExecutionStatus{0}}, "statuses"},
		"unknown status": {&sundialv1.ListTenantExecutionsRequest{Statuses: []sundialv1.ExecutionStatus{999}}, "statuses"},
		"negative page":  {&sundialv1.ListTenantExecutionsRequest{PageSize: -1}, "page_size"},
	} {
		_, err := tenantExecutionsQuery("acme", c.req, now)
		if _, ok := violations(t, err)[c.field]; !ok {
			t.Errorf("%s: %v, want a violation on %s", name, err, c.field)
		}
	}
}
