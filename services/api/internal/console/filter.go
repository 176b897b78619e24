package console

import (
	"net/url"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/client"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// listFilter is the jobs list's filter as the page, its links and the bulk
// forms carry it: the text as typed, what it means for the api, and the
// errors to show beside its fields.
type listFilter struct {
	Status, Labels, Name, From, Before, Priority string
	Errors                                       map[string]string

	status       sundialv1.JobStatus
	priority     sundialv1.Priority
	labels       map[string]string
	from, before *timestamppb.Timestamp
}

// instantLayouts are what the next-fire fields accept, all read as UTC:
// the browser's datetime-local value first.
var instantLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339, "2006-01-02 15:04", "2006-01-02 15:04:05", "2006-01-02"}

func parseInstant(s string) (time.Time, bool) {
	for _, l := range instantLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// readFilter reads the filter from a query or a form (get is Query().Get
// or PostFormValue).
func readFilter(get func(string) string) listFilter {
	f := listFilter{Status: get("status"), Labels: strings.TrimSpace(get("labels")), Name: strings.TrimSpace(get("name")),
		From: strings.TrimSpace(get("from")), Before: strings.TrimSpace(get("before")), Priority: get("priority"), Errors: map[string]string{}}
	if f.Status != "" {
		if v, ok := sundialv1.JobStatus_value["JOB_STATUS_"+strings.ToUpper(f.Status)]; ok {
			f.status = sundialv1.JobStatus(v)
		} else {
			f.Errors["Status"] = "unknown status " + f.Status
		}
	}
	if f.Priority != "" {
		if v, ok := sundialv1.Priority_value["PRIORITY_"+strings.ToUpper(f.Priority)]; ok && v != 0 {
			f.priority = sundialv1.Priority(v)
		} else {
			f.Errors["Priority"] = "unknown priority " + f.Priority
		}
	}
	if f.Labels != "" {
		labels, err := parseLabels(f.Labels)
		if err != nil {
			f.Errors["Labels"] = err.Error()
		}
		f.labels = labels
	}
	for _, b := range []struct {
		key  string
		text *string
		into **timestamppb.Timestamp
	}{{"From", &f.From, &f.from}, {"Before", &f.Before, &f.before}} {
		if *b.text == "" {
			continue
		}
		t, ok := parseInstant(*b.text)
		if !ok {
			f.Errors[b.key] = "a UTC date and time, such as 2026-11-27T02:00"
			continue
		}
		*b.into = timestamppb.New(t)
		// As the browser's datetime-local field shows it (it leaves other
		// forms blank, and the next submit would drop the bound).
		if t.Second() == 0 && t.Nanosecond() == 0 {
			*b.text = t.Format("2006-01-02T15:04")
		} else {
			*b.text = t.Format("2006-01-02T15:04:05")
		}
	}
	return f
}

// refused puts the api's field errors about the filter beside its fields;
// false when err is not about them.
func (f *listFilter) refused(err error) bool {
	vs := client.FieldViolations(err)
	if vs == nil {
		return false
	}
	for _, v := range vs {
		key := map[string]string{"status": "Status", "priority": "Priority", "name_contains": "Name", "next_fire_after": "From", "next_fire_before": "Before"}[v.Field]
		if strings.HasPrefix(v.Field, "labels") {
			key = "Labels"
		}
		if key == "" {
			return false
		}
		f.Errors[key] = v.Description
	}
	return true
}

func (f listFilter) listRequest() *sundialv1.ListJobsRequest {
	return &sundialv1.ListJobsRequest{Status: f.status, Priority: f.priority, Labels: f.labels, NameContains: f.Name, NextFireAfter: f.from, NextFireBefore: f.before}
}

func (f listFilter) bulkRequest(action sundialv1.BulkAction) *sundialv1.BulkJobActionRequest {
	return &sundialv1.BulkJobActionRequest{Action: action, Status: f.status, Priority: f.priority, Labels: f.labels, NameContains: f.Name, NextFireAfter: f.from, NextFireBefore: f.before}
}

// values is the filter as query parameters, only those set.
func (f listFilter) values() url.Values {
	q := url.Values{}
	for _, kv := range f.Pairs() {
		if kv[1] != "" {
			q.Set(kv[0], kv[1])
		}
	}
	return q
}

func (f listFilter) Pairs() [][2]string {
	return [][2]string{{"status", f.Status}, {"priority", f.Priority}, {"labels", f.Labels}, {"name", f.Name}, {"from", f.From}, {"before", f.Before}}
}

// text says what the filter keeps, for a confirmation.
func (f listFilter) text() string {
	parts := []string{}
	if f.Status != "" {
		parts = append(parts, "status "+f.Status)
	} else {
		parts = append(parts, "all but deleted")
	}
	if f.Priority != "" {
		parts = append(parts, "priority "+f.Priority)
	}
	if f.Labels != "" {
		parts = append(parts, "labels "+f.Labels)
	}
	if f.Name != "" {
		parts = append(parts, "name containing "+f.Name)
	}
	if f.From != "" {
		parts = append(parts, "next fire from "+f.from.AsTime().UTC().Format("2006-01-02 15:04Z"))
	}
	if f.Before != "" {
		parts = append(parts, "next fire before "+f.before.AsTime().UTC().Format("2006-01-02 15:04Z"))
	}
	return strings.Join(parts, ", ")
}
