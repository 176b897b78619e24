package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// SigningKeyStore is the part of *signingkey.Store the service uses.
type SigningKeyStore interface {
	Create(ctx context.Context, tenant, actor string) (signingkey.Key, error)
	Rotate(ctx context.Context, tenant, actor string, overlap time.Duration) (cur, prev signingkey.Key, err error)
	List(ctx context.Context, tenant string) ([]signingkey.Key, error)
	ListAudit(ctx context.Context, tenant string, before int64, limit int) ([]signingkey.AuditEntry, error)
}

// SigningKeyService implements sundial.v1.SigningKeyService: the calling
// tenant's webhook signing keys. Secrets appear in Create's and Rotate's
// answers only, never in a log.
type SigningKeyService struct {
	sundialv1.UnimplementedSigningKeyServiceServer

	store   SigningKeyStore
	logger  *slog.Logger
	metrics *Metrics
}

// NewSigningKeyService returns the service over store.
func NewSigningKeyService(store SigningKeyStore, logger *slog.Logger, metrics *Metrics) (*SigningKeyService, error) {
	if store == nil {
		return nil, errors.New("server: SigningKeyService needs a store")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &SigningKeyService{store: store, logger: logger, metrics: metrics}, nil
}

func keyToProto(k signingkey.Key) *sundialv1.SigningKey {
	p := &sundialv1.SigningKey{KeyId: k.ID, CreateTime: timestamppb.New(k.CreatedAt), Current: k.Current(), CreatedBy: k.CreatedBy}
	if !k.Current() {
		p.ExpireTime = timestamppb.New(k.ExpiresAt)
	}
	return p
}

// overlapOf reads an optional overlap field: unset is the default, zero
// is none, and it must lie in [0, MaxOverlap].
func overlapOf(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return signingkey.DefaultOverlap, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalidf(field, "is not a valid duration")
	}
	o := d.AsDuration()
	if o < 0 || o > signingkey.MaxOverlap {
		return 0, invalidf(field, "must be between 0 and %s, got %s", signingkey.MaxOverlap, o)
	}
	return o, nil
}

func (s *SigningKeyService) status(ctx context.Context, op string, err error) error {
	switch {
	case errors.Is(err, signingkey.ErrExists):
		return status.Error(codes.AlreadyExists, "the tenant's signing key was shown already; rotate it (RotateSigningKey) for a new one")
	case errors.Is(err, signingkey.ErrNone):
		return status.Error(codes.FailedPrecondition, "the tenant has no signing key; create one first (CreateSigningKey)")
	}
	return statusOf(ctx, s.logger, s.metrics, op, err)
}

// CreateSigningKey implements sundialv1.SigningKeyServiceServer.
func (s *SigningKeyService) CreateSigningKey(ctx context.Context, req *sundialv1.CreateSigningKeyRequest) (*sundialv1.CreateSigningKeyResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	// The platform's secret no longer signs beside a tenant's key: only
	// the workers' --platform-signature-until keeps it, for every tenant,
	// during a migration. Zero (or unset) asks for nothing and is taken.
	if o := req.GetPlatformOverlap(); o != nil && (o.CheckValid() != nil || o.AsDuration() != 0) {
		return nil, invalidf("platform_overlap", "is no longer supported: the platform secret signs nothing beside a tenant's key (operators keep it for a migration with the workers' --platform-signature-until); leave it unset")
	}
	actor := actorOf(ctx, tenant)
	k, err := s.store.Create(ctx, tenant, actor)
	if err != nil {
		return nil, s.status(ctx, "CreateSigningKey", err)
	}
	s.logger.InfoContext(ctx, "signing key shown", "tenant", tenant, "key_id", k.ID, "made_by", k.CreatedBy, "actor", actor)
	return &sundialv1.CreateSigningKeyResponse{Key: keyToProto(k), Secret: string(k.Secret)}, nil
}

// RotateSigningKey implements sundialv1.SigningKeyServiceServer.
func (s *SigningKeyService) RotateSigningKey(ctx context.Context, req *sundialv1.RotateSigningKeyRequest) (*sundialv1.RotateSigningKeyResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	overlap, err := overlapOf("overlap", req.GetOverlap())
	if err != nil {
		return nil, err
	}
	cur, prev, err := s.store.Rotate(ctx, tenant, actorOf(ctx, tenant), overlap)
	if err != nil {
		return nil, s.status(ctx, "RotateSigningKey", err)
	}
	s.logger.InfoContext(ctx, "signing key rotated", "tenant", tenant, "key_id", cur.ID, "previous_key_id", prev.ID,
		"previous_expires_at", prev.ExpiresAt, "actor", cur.CreatedBy)
	return &sundialv1.RotateSigningKeyResponse{Key: keyToProto(cur), Secret: string(cur.Secret), Previous: keyToProto(prev)}, nil
}

// ListSigningKeys implements sundialv1.SigningKeyServiceServer.
func (s *SigningKeyService) ListSigningKeys(ctx context.Context, _ *sundialv1.ListSigningKeysRequest) (*sundialv1.ListSigningKeysResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := s.store.List(ctx, tenant)
	if err != nil {
		return nil, s.status(ctx, "ListSigningKeys", err)
	}
	out := &sundialv1.ListSigningKeysResponse{}
	for _, k := range keys {
		out.Keys = append(out.Keys, keyToProto(k))
	}
	return out, nil
}

// ListSigningKeyAudit implements sundialv1.SigningKeyServiceServer: the
// tenant's signing-key trail, newest first (a platform operator's, of the
// tenant its call names).
func (s *SigningKeyService) ListSigningKeyAudit(ctx context.Context, req *sundialv1.ListSigningKeyAuditRequest) (*sundialv1.ListSigningKeyAuditResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	// The token's scope is the tenant it pages through.
	scope := map[string]string{"t": tenant}
	c, err := auditCursor(req.GetPageToken(), scope, false, "another tenant")
	if err != nil {
		return nil, err
	}
	entries, err := s.store.ListAudit(ctx, tenant, c.Seq, size+1)
	if err != nil {
		return nil, s.status(ctx, "ListSigningKeyAudit", err)
	}
	out := &sundialv1.ListSigningKeyAuditResponse{}
	entries, out.NextPageToken = auditPage(entries, size, func(e signingkey.AuditEntry) audittrail.Cursor {
		return audittrail.Cursor{Seq: e.Seq, Scope: scope}
	})
	for _, e := range entries {
		out.Entries = append(out.Entries, &sundialv1.SigningKeyAuditEntry{KeyId: e.KeyID, Actor: e.Actor, Action: e.Action,
			Time: timestamppb.New(e.At), Detail: e.Detail})
	}
	return out, nil
}
