package console

import (
	"net/http"

	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// What the console's controls do, as the api's methods: the role table
// (auth.Allowed) decides both whether a control is drawn and whether its
// request is served, so the two cannot disagree.
var controls = map[string]string{
	"create":   sundialv1.JobService_CreateJob_FullMethodName,
	"edit":     sundialv1.JobService_UpdateJob_FullMethodName,
	"pause":    sundialv1.JobService_PauseJob_FullMethodName,
	"resume":   sundialv1.JobService_ResumeJob_FullMethodName,
	"trigger":  sundialv1.JobService_TriggerJob_FullMethodName,
	"delete":   sundialv1.JobService_DeleteJob_FullMethodName,
	"cancel":   sundialv1.JobService_CancelExecution_FullMethodName,
	"backfill": sundialv1.JobService_BackfillJob_FullMethodName,
	"bulk":     sundialv1.JobService_BulkJobAction_FullMethodName,
	"redrive":  sundialv1.DeadLetterService_RedriveDeadLetters_FullMethodName,
}

// Role is the session's role, as the header shows it.
func (s *session) Role() string { return string(s.role) }

// Can says whether the session's role may use a control ("create",
// "pause", "redrive", … as in controls); templates draw a control only
// when it may. An unknown control is refused.
func (s *session) Can(control string) bool {
	m, ok := controls[control]
	return ok && auth.Allowed(s.role, m) == nil
}

// permit answers 403, naming the role and the call, when the session's
// role may not use control, and reports whether it may. Every handler of
// a control calls it before anything else — the form pages, the dry runs
// and confirmations included — so a role learns at the first request,
// not after filling a form, and nothing reaches the api. (The api refuses
// it again: the console's check is not the one that protects.)
func (c *Console) permit(w http.ResponseWriter, s *session, control string) bool {
	m, ok := controls[control]
	if !ok {
		c.render(w, http.StatusNotFound, "error", s, map[string]any{"Title": "Not found", "Message": "no such action"})
		return false
	}
	if err := auth.Allowed(s.role, m); err != nil {
		c.render(w, http.StatusForbidden, "error", s, map[string]any{"Title": "Forbidden", "Message": status.Convert(err).Message()})
		return false
	}
	return true
}
