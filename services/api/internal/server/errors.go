package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// invalid is an InvalidArgument status whose message lists every violation
// ("field: description; ...") and whose details carry them as a
// google.rpc.BadRequest, for clients that act on individual fields.
func invalid(vs ...jobspec.FieldViolation) error {
	jerr := &jobspec.Error{Violations: vs}
	st := status.New(codes.InvalidArgument, jerr.Error())
	br := &errdetails.BadRequest{}
	for _, v := range vs {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Description})
	}
	if withDetails, err := st.WithDetails(br); err == nil {
		st = withDetails
	}
	return st.Err()
}

func invalidf(field, format string, args ...any) error {
	return invalid(jobspec.FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// fromSpec turns a jobspec validation error into InvalidArgument. Field
// paths stay relative to the job (schedule.cron, not job.schedule.cron):
// that is how users write jobs, in files and on the command line.
func fromSpec(err error) error {
	var jerr *jobspec.Error
	if errors.As(err, &jerr) {
		return invalid(jerr.Violations...)
	}
	return invalidf("job", "%v", err)
}

// rejection is an error a decision function returns to abort its
// transaction with a specific status; it passes through the store
// unchanged.
type rejection struct{ st *status.Status }

func (r *rejection) Error() string              { return r.st.Message() }
func (r *rejection) GRPCStatus() *status.Status { return r.st }

func reject(c codes.Code, format string, args ...any) error {
	return &rejection{st: status.Newf(c, format, args...)}
}

// statusOf maps an error from the store or a decision function to the
// status the client gets. Unexpected errors become Internal (or Unavailable
// when the database is unreachable) without leaking their text.
func (s *JobService) statusOf(ctx context.Context, op string, err error) error {
	return statusOf(ctx, s.logger, s.metrics, op, err)
}

func statusOf(ctx context.Context, logger *slog.Logger, metrics *Metrics, op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrNotFound) {
		return status.Error(codes.NotFound, "job not found")
	}
	var missing *store.MissingDeadLettersError
	if errors.As(err, &missing) {
		return status.Errorf(codes.NotFound, "no dead letter for execution %s", strings.Join(missing.ExecutionIDs, ", "))
	}
	if errors.Is(err, store.ErrDeadLetterNotFound) {
		return status.Error(codes.NotFound, "dead letter not found")
	}
	var gone *store.JobGoneError
	if errors.As(err, &gone) {
		return status.Errorf(codes.FailedPrecondition, "execution %s: its job %s no longer exists (purged); nothing to re-drive it with", gone.ExecutionID, gone.JobID)
	}
	var reused *store.IdempotencyMismatchError
	if errors.As(err, &reused) {
		return idempotencyMismatch(reused)
	}
	var stale *store.VersionMismatchError
	if errors.As(err, &stale) {
		return versionMismatch(stale)
	}
	var over *quotas.ExceededError
	if errors.As(err, &over) {
		metrics.quotaRejections.WithLabelValues(over.Quota).Inc()
		logger.InfoContext(ctx, "quota exceeded", "op", op, "tenant", over.Tenant, "quota", over.Quota)
		st := status.New(codes.ResourceExhausted, over.Error())
		if d, derr := st.WithDetails(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject: "tenant:" + over.Tenant, Description: over.Error(),
		}}}); derr == nil {
			st = d
		}
		return st.Err()
	}
	var rej *rejection
	if errors.As(err, &rej) {
		return rej.st.Err()
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return err
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return status.FromContextError(ctxErr).Err()
	}
	logger.ErrorContext(ctx, "request failed", "op", op, "err", err)
	var netErr *net.OpError
	var connErr *pgconn.ConnectError
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.As(err, &netErr) || errors.As(err, &connErr) {
		return status.Error(codes.Unavailable, "the job store is unavailable; retry later")
	}
	return status.Error(codes.Internal, "internal error")
}

// rejectErr wraps a status error (such as invalid's) as a rejection.
func rejectErr(err error) error {
	return &rejection{st: status.Convert(err)}
}

// versionMismatch is FailedPrecondition naming the job's current version,
// so a client can re-read the job and decide again. The details carry a
// google.rpc.PreconditionFailure on expected_version for clients that act
// on it.
func versionMismatch(e *store.VersionMismatchError) error {
	msg := fmt.Sprintf("expected_version: the job is at version %d, not %d; read it again and retry the change against version %d", e.Current, e.Expected, e.Current)
	st := status.New(codes.FailedPrecondition, msg)
	if d, err := st.WithDetails(&errdetails.PreconditionFailure{Violations: []*errdetails.PreconditionFailure_Violation{{
		Type: "VERSION", Subject: "expected_version", Description: fmt.Sprintf("current version is %d", e.Current),
	}}}); err == nil {
		st = d
	}
	return st.Err()
}

// idempotencyMismatch is AlreadyExists for a key reused with another job,
// naming the field and the job the key made, with the field in a
// google.rpc.BadRequest as InvalidArgument's are.
func idempotencyMismatch(e *store.IdempotencyMismatchError) error {
	desc := fmt.Sprintf("was used at %s to create job %s from a different job; a key stands for one request until %s: send that same job to get job %s back, or use a new key",
		e.CreatedAt.UTC().Format(time.RFC3339), e.JobID, e.ExpiresAt.UTC().Format(time.RFC3339), e.JobID)
	st := status.New(codes.AlreadyExists, "idempotency_key: "+desc)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{
		Field: "idempotency_key", Description: desc,
	}}}); err == nil {
		st = d
	}
	return st.Err()
}
