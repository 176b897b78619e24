package tokens

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/deniedaudit"
)

// Bounds of CreateTokenRequest.ttl.
const (
	MinTTL = time.Minute
	MaxTTL = 3650 * 24 * time.Hour
)

const maxNameLen = 64

// roles maps the API's roles to pkg/domain/auth's, one to one.
var roles = map[sundialv1.Role]auth.Role{
	sundialv1.Role_ROLE_TENANT_ADMIN:      auth.RoleAdmin,
	sundialv1.Role_ROLE_TENANT_READ_ONLY:  auth.RoleReadOnly,
	sundialv1.Role_ROLE_PLATFORM_OPERATOR: auth.RoleOperator,
}

// RoleToProto is the API's name of r.
func RoleToProto(r auth.Role) sundialv1.Role {
	for p, a := range roles {
		if a == r {
			return p
		}
	}
	return sundialv1.Role_ROLE_UNSPECIFIED
}

// Service implements sundial.v1.TokenService.
type Service struct {
	sundialv1.UnimplementedTokenServiceServer

	store  *Store
	clock  clock.Clock
	logger *slog.Logger
	denied DeniedLister
}

// DeniedLister reads the refused-call trail (deniedaudit.List): up to
// limit rows, newest first, before seq; tenant's only unless "".
type DeniedLister func(ctx context.Context, tenant string, before int64, limit int) ([]deniedaudit.Entry, error)

// ServiceOption varies NewService.
type ServiceOption func(*Service)

// WithDenied serves ListAccessDenied from l; without it the call is
// Unimplemented.
func WithDenied(l DeniedLister) ServiceOption { return func(s *Service) { s.denied = l } }

// NewService returns the service over store.
func NewService(store *Store, clk clock.Clock, logger *slog.Logger, opts ...ServiceOption) (*Service, error) {
	if store == nil {
		return nil, errors.New("tokens: Service needs a store")
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{store: store, clock: clk, logger: logger}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

func caller(ctx context.Context) (auth.Principal, error) {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok {
		return p, status.Error(codes.Unauthenticated, "no caller for this call")
	}
	return p, nil
}

func invalid(field, msg string) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, msg)
}

// ToProto is the API form of t.
func ToProto(t Token) *sundialv1.Token {
	out := &sundialv1.Token{Id: t.ID, Tenant: t.Tenant, Name: t.Name, Role: RoleToProto(t.Role),
		CreateTime: timestamppb.New(t.CreatedAt), CreatedBy: t.CreatedBy, RevokedBy: t.RevokedBy}
	if t.ExpiresAt != nil {
		out.ExpireTime = timestamppb.New(*t.ExpiresAt)
	}
	if t.RevokedAt != nil {
		out.RevokeTime = timestamppb.New(*t.RevokedAt)
	}
	if t.LastUsedAt != nil {
		out.LastUseTime = timestamppb.New(*t.LastUsedAt)
	}
	return out
}

// mayMake says whether a caller of role from may make or revoke a token
// of role to: admins their tenant's admin and read-only tokens, operators
// operator tokens. Nobody raises a token above their own role.
func mayMake(from, to auth.Role) bool {
	switch from {
	case auth.RoleAdmin:
		return to == auth.RoleAdmin || to == auth.RoleReadOnly
	case auth.RoleOperator:
		return to == auth.RoleOperator
	}
	return false
}

// CreateToken makes a token of the caller's own tenant.
func (s *Service) CreateToken(ctx context.Context, req *sundialv1.CreateTokenRequest) (*sundialv1.CreateTokenResponse, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	name := req.GetName()
	if len(name) > maxNameLen || !auth.ValidName(name, true) {
		return nil, invalid("name", "must be 1-64 letters, digits and . _ - @")
	}
	role, ok := roles[req.GetRole()]
	if !ok {
		return nil, invalid("role", "must be ROLE_TENANT_ADMIN, ROLE_TENANT_READ_ONLY or ROLE_PLATFORM_OPERATOR")
	}
	if !mayMake(p.Role, role) {
		return nil, status.Errorf(codes.PermissionDenied, "role %s may not make a %s token (admins make admin and read-only tokens, operators operator tokens)", p.Role, role)
	}
	var ttl time.Duration
	if d := req.GetTtl(); d != nil {
		if d.CheckValid() != nil {
			return nil, invalid("ttl", "is not a valid duration")
		}
		ttl = d.AsDuration()
		if ttl < MinTTL || ttl > MaxTTL {
			return nil, invalid("ttl", "must be between 1m and 3650 days (unset: no expiry), got "+ttl.String())
		}
	}
	t, token, err := s.store.Create(ctx, p.Tenant, name, role, ttl, p.Actor)
	if errors.Is(err, ErrNameInUse) {
		return nil, status.Errorf(codes.AlreadyExists, "name: tenant %s has a token named %q not revoked; revoke it or pick another name", p.Tenant, name)
	}
	if err != nil {
		return nil, s.internal(ctx, "CreateToken", err)
	}
	s.logger.InfoContext(ctx, "api token created", "tenant", t.Tenant, "token_id", t.ID, "name", t.Name, "role", string(t.Role), "actor", p.Actor)
	return &sundialv1.CreateTokenResponse{Token: ToProto(t), Secret: token}, nil
}

// ListTokens lists the tenant's tokens: the caller's, or the one a
// platform operator names.
func (s *Service) ListTokens(ctx context.Context, req *sundialv1.ListTokensRequest) (*sundialv1.ListTokensResponse, error) {
	tenant, ok := auth.TenantFrom(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "no tenant for this call")
	}
	ts, err := s.store.List(ctx, tenant, req.GetIncludeInactive())
	if err != nil {
		return nil, s.internal(ctx, "ListTokens", err)
	}
	resp := &sundialv1.ListTokensResponse{}
	for _, t := range ts {
		resp.Tokens = append(resp.Tokens, ToProto(t))
	}
	return resp, nil
}

// RevokeToken revokes a token of the caller's own tenant.
func (s *Service) RevokeToken(ctx context.Context, req *sundialv1.RevokeTokenRequest) (*sundialv1.RevokeTokenResponse, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if _, _, ok := parseToken(Prefix + req.GetId() + "_x"); !ok {
		return nil, invalid("id", "must be a token id (16 hex digits)")
	}
	notFound := status.Errorf(codes.NotFound, "id: tenant %s has no token %s", p.Tenant, req.GetId())
	t, err := s.store.Revoke(ctx, p.Tenant, req.GetId(), p.Actor, func(t Token) error {
		if p.Role == auth.RoleOperator && t.Role != auth.RoleOperator {
			// Operators keep to operator tokens; to them the rest is
			// not there.
			return ErrNotFound
		}
		return nil
	})
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, notFound
	case err != nil:
		return nil, s.internal(ctx, "RevokeToken", err)
	}
	s.logger.InfoContext(ctx, "api token revoked", "tenant", t.Tenant, "token_id", t.ID, "name", t.Name, "actor", p.Actor)
	return &sundialv1.RevokeTokenResponse{Token: ToProto(t)}, nil
}

// ListTokenAudit pages through the tenant's token audit trail.
func (s *Service) ListTokenAudit(ctx context.Context, req *sundialv1.ListTokenAuditRequest) (*sundialv1.ListTokenAuditResponse, error) {
	tenant, ok := auth.TenantFrom(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "no tenant for this call")
	}
	size, before, err := page(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	rows, err := s.store.ListAudit(ctx, tenant, before, size+1)
	if err != nil {
		return nil, s.internal(ctx, "ListTokenAudit", err)
	}
	resp := &sundialv1.ListTokenAuditResponse{}
	if len(rows) > size {
		rows = rows[:size]
		resp.NextPageToken = pageToken(rows[size-1].Seq)
	}
	for _, e := range rows {
		resp.Entries = append(resp.Entries, &sundialv1.TokenAuditEntry{TokenId: e.TokenID, Actor: e.Actor, Action: e.Action, Time: timestamppb.New(e.At), Detail: e.Detail})
	}
	return resp, nil
}

// page reads a list call's page size (default 100, at most 1000) and
// token (the sequence number to continue before).
func page(size32 int32, token string) (size int, before int64, err error) {
	size = int(size32)
	switch {
	case size == 0:
		size = 100
	case size < 0 || size > 1000:
		return 0, 0, invalid("page_size", "must be between 1 and 1000 (0: 100)")
	}
	if token != "" {
		if before, err = audittrail.DecodeSeqToken(token); err != nil {
			return 0, 0, invalid("page_token", "is not a token this server issued")
		}
	}
	return size, before, nil
}

func pageToken(seq int64) string { return audittrail.SeqToken(seq) }

// ListAccessDenied pages through the refused-call trail: an admin's
// tenant's rows, an operator's named tenant's or every row.
func (s *Service) ListAccessDenied(ctx context.Context, req *sundialv1.ListAccessDeniedRequest) (*sundialv1.ListAccessDeniedResponse, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if s.denied == nil {
		return nil, status.Error(codes.Unimplemented, "this api keeps no refused-call trail")
	}
	tenant := p.Tenant
	if named, ok := auth.OperatorTenant(ctx); ok {
		tenant = named // "" when the operator named none: every tenant
	}
	size, before, err := page(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	rows, err := s.denied(ctx, tenant, before, size+1)
	if err != nil {
		return nil, s.internal(ctx, "ListAccessDenied", err)
	}
	resp := &sundialv1.ListAccessDeniedResponse{}
	if len(rows) > size {
		rows = rows[:size]
		resp.NextPageToken = pageToken(rows[size-1].Seq)
	}
	for _, e := range rows {
		resp.Entries = append(resp.Entries, &sundialv1.AccessDeniedEntry{Time: timestamppb.New(e.At), Code: e.CodeName, Method: e.Method,
			Source: e.Source, Tenant: e.Tenant, Actor: e.Actor, TokenId: e.TokenID, Fingerprint: e.Fingerprint, Suppressed: e.Suppressed})
	}
	return resp, nil
}

func (s *Service) internal(ctx context.Context, method string, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	s.logger.ErrorContext(ctx, "token store failed", "method", method, "err", err)
	return status.Error(codes.Unavailable, "the token store did not answer; retry")
}
