package server

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// A role reads, in the merged view, the trails it may read one by one:
// the rule the console's audit page and ListAudit share.
func TestReadableTrailsFollowTheRoleTable(t *testing.T) {
	all := audittrail.Kinds
	noTokens := []audittrail.Kind{audittrail.KindCalendar, audittrail.KindJob, audittrail.KindSigningKey}
	for role, want := range map[auth.Role][]audittrail.Kind{auth.RoleAdmin: all, auth.RoleOperator: all, auth.RoleReadOnly: noTokens} {
		if got := ReadableTrails(role, nil); !slices.Equal(got, want) {
			t.Errorf("%s reads %v, want %v", role, got, want)
		}
	}
	if got := ReadableTrails(auth.RoleReadOnly, []audittrail.Kind{audittrail.KindToken}); len(got) != 0 {
		t.Errorf("read-only asking for the token trail gets %v", got)
	}
	err := TrailReadable(auth.RoleReadOnly, audittrail.KindToken)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "kinds: role read-only may not read the token trail") {
		t.Errorf("read-only, token trail: %v", err)
	}
	if err := TrailReadable(auth.Role("nobody"), audittrail.KindJob); status.Code(err) != codes.PermissionDenied {
		t.Errorf("an unknown role reads the job trail: %v", err)
	}
}

// Every trail has a wire kind and back, so no entry goes out UNSPECIFIED.
func TestAuditKindsMapEveryTrail(t *testing.T) {
	for _, k := range audittrail.Kinds {
		w := AuditKindOf(k)
		if w == sundialv1.AuditKind_AUDIT_KIND_UNSPECIFIED || auditKinds[w] != k {
			t.Errorf("trail %s: wire kind %v", k, w)
		}
		if _, ok := trailReads[k]; !ok {
			t.Errorf("trail %s has no read rule", k)
		}
	}
	if len(auditKinds) != len(sundialv1.AuditKind_value)-1 {
		t.Errorf("%d wire kinds mapped, %d declared", len(auditKinds), len(sundialv1.AuditKind_value)-1)
	}
}
