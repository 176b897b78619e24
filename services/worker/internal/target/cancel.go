package target

import (
	"encoding/json"
	"net/textproto"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// CancelBody is the body of a cancel notice: the JSON a target receives
// when an attempt already sent to it was cancelled.
type CancelBody struct {
	Event       string    `json:"event"`
	ExecutionID string    `json:"execution_id"`
	JobID       string    `json:"job_id"`
	Tenant      string    `json:"tenant"`
	Attempt     int32     `json:"attempt"`
	CancelledBy string    `json:"cancelled_by"`
	Cancelled   time.Time `json:"cancelled_time"`
}

// CancelNoticeTimeout bounds the sending of a cancel notice.
const CancelNoticeTimeout = 10 * time.Second

// CancelNotice is the firing whose delivery tells f's target that f's
// attempt was cancelled by by at at: sent as Request{Event:
// firing.EventCancelled}, it is signed like an attempt, over a CancelBody.
// An HTTP target with a cancel_url gets a POST there (with the target's
// headers); without one, at its url, with the target's method. A Kafka
// target gets a record on its topic, with its key. The original firing is
// not changed.
func CancelNotice(f *sundialv1.Firing, by string, at time.Time) *sundialv1.Firing {
	n := proto.Clone(f).(*sundialv1.Firing)
	body, _ := json.Marshal(CancelBody{
		Event: firing.EventCancelled, ExecutionID: f.GetExecutionId(), JobID: f.GetJobId(), Tenant: f.GetTenant(),
		Attempt: max(f.GetAttempt(), 1), CancelledBy: by, Cancelled: at.UTC(),
	})
	n.Payload = body
	if d := n.GetAttemptTimeout().AsDuration(); d <= 0 || d > CancelNoticeTimeout {
		n.AttemptTimeout = durationpb.New(CancelNoticeTimeout)
	}
	if h := n.GetTarget().GetHttp(); h != nil {
		if h.GetCancelUrl() != "" {
			h.Url, h.Method = h.GetCancelUrl(), "POST"
		}
		if h.Headers == nil {
			h.Headers = map[string]string{}
		}
		for k := range h.Headers {
			if textproto.CanonicalMIMEHeaderKey(k) == "Content-Type" {
				delete(h.Headers, k)
			}
		}
		h.Headers["Content-Type"] = "application/json"
	}
	return n
}
