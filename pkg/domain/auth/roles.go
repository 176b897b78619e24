package auth

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Role is what a token may do: see Allowed.
type Role string

// The roles. Static tokens are RoleAdmin unless their principal says
// otherwise.
const (
	// RoleAdmin is a tenant admin: every call, on its own tenant.
	RoleAdmin Role = "admin"
	// RoleReadOnly is a tenant read-only token: the Read calls, on its own
	// tenant.
	RoleReadOnly Role = "read-only"
	// RoleOperator is a platform operator: the Read calls on any tenant
	// (TenantHeader), the dead-letter re-drive of a named tenant, and its
	// own operator tokens.
	RoleOperator Role = "operator"
)

// Roles lists every role.
var Roles = []Role{RoleAdmin, RoleReadOnly, RoleOperator}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("role %q: must be one of admin, read-only, operator", s)
}

// Access is the kind of a call, which decides the roles that may make it.
type Access int

// The kinds of call.
const (
	// Read changes nothing.
	Read Access = iota + 1
	// Write changes a tenant's jobs, calendars or signing keys.
	Write
	// Redrive re-drives dead letters.
	Redrive
	// ManageTokens creates and revokes tokens (the handler keeps each
	// role to the tokens it may make: admins their tenant's admin and
	// read-only tokens, operators operator tokens).
	ManageTokens
)

// allowed is which roles may make each kind of call.
var allowed = map[Access][]Role{
	Read:         {RoleAdmin, RoleReadOnly, RoleOperator},
	Write:        {RoleAdmin},
	Redrive:      {RoleAdmin, RoleOperator},
	ManageTokens: {RoleAdmin, RoleOperator},
}

// Methods is the kind of every Sundial RPC: the one table of who may call
// what. A method missing here is refused to every role (a test checks
// that every RPC of every sundial.v1 service is here).
var Methods = map[string]Access{
	"/sundial.v1.JobService/CreateJob":       Write,
	"/sundial.v1.JobService/CreateJobs":      Write,
	"/sundial.v1.JobService/GetJob":          Read,
	"/sundial.v1.JobService/ListJobs":        Read,
	"/sundial.v1.JobService/UpdateJob":       Write,
	"/sundial.v1.JobService/PauseJob":        Write,
	"/sundial.v1.JobService/ResumeJob":       Write,
	"/sundial.v1.JobService/DeleteJob":       Write,
	"/sundial.v1.JobService/TriggerJob":      Write,
	"/sundial.v1.JobService/PreviewSchedule": Read,
	"/sundial.v1.JobService/ListExecutions":  Read,
	"/sundial.v1.JobService/GetExecution":    Read,
	"/sundial.v1.JobService/BackfillJob":     Write,
	"/sundial.v1.JobService/ListJobAudit":    Read,
	"/sundial.v1.JobService/BulkJobAction":   Write,
	"/sundial.v1.JobService/CancelExecution": Write,

	"/sundial.v1.JobService/ListTenantExecutions": Read,

	"/sundial.v1.DeadLetterService/ListDeadLetters":    Read,
	"/sundial.v1.DeadLetterService/GetDeadLetter":      Read,
	"/sundial.v1.DeadLetterService/RedriveDeadLetters": Redrive,

	"/sundial.v1.ForecastService/GetForecast": Read,

	// Each trail as its own List…Audit call allows it: the handler keeps a
	// role to the trails it may read (the token trail: ManageTokens).
	"/sundial.v1.AuditService/ListAudit": Read,

	"/sundial.v1.CalendarService/CreateCalendar": Write,
	"/sundial.v1.CalendarService/GetCalendar":    Read,
	"/sundial.v1.CalendarService/ListCalendars":  Read,
	"/sundial.v1.CalendarService/UpdateCalendar": Write,
	"/sundial.v1.CalendarService/DeleteCalendar": Write,
	"/sundial.v1.CalendarService/ImportCalendar": Write,

	"/sundial.v1.CalendarService/ListCalendarAudit": Read,

	"/sundial.v1.SigningKeyService/CreateSigningKey": Write,
	"/sundial.v1.SigningKeyService/RotateSigningKey": Write,
	"/sundial.v1.SigningKeyService/ListSigningKeys":  Read,

	"/sundial.v1.SigningKeyService/ListSigningKeyAudit": Read,

	"/sundial.v1.TokenService/CreateToken":    ManageTokens,
	"/sundial.v1.TokenService/ListTokens":     ManageTokens,
	"/sundial.v1.TokenService/RevokeToken":    ManageTokens,
	"/sundial.v1.TokenService/ListTokenAudit": ManageTokens,
	// Refused calls: an admin its tenant's, an operator every tenant's
	// (the handler narrows).
	"/sundial.v1.TokenService/ListAccessDenied": ManageTokens,
}

// Allowed says whether role may call fullMethod: nil, or PermissionDenied
// naming the role and the method.
func Allowed(role Role, fullMethod string) error {
	if Public(fullMethod) {
		return nil
	}
	name := strings.TrimPrefix(fullMethod, "/")
	access, ok := Methods[fullMethod]
	if !ok {
		return status.Errorf(codes.PermissionDenied, "role %s may not call %s: the method has no entry in the role table", role, name)
	}
	for _, r := range allowed[access] {
		if r == role {
			return nil
		}
	}
	return status.Errorf(codes.PermissionDenied, "role %s may not call %s", role, name)
}
