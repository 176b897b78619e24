package server

import (
	"fmt"
	"slices"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// SecretCatalog says whether a tenant has a target secret, without its
// value; secrets.Dir is one (the workers' --secrets-dir layout,
// <dir>/<tenant>/<name>).
type SecretCatalog interface {
	Has(tenant, name string) (bool, error)
}

// checkSecrets refuses a job whose headers reference a secret its tenant
// does not have, naming the header: such a job could only fail (the worker
// resolves references among the job's own tenant's secrets alone), and
// before secrets were scoped it was how one tenant read another's. Without
// a catalog every reference is refused, since none can be shown to be the
// tenant's. The description names the secret, never a value.
func (s *JobService) checkSecrets(tenant string, job *sundialv1.Job) error {
	var vs []jobspec.FieldViolation
	for _, header := range sortedHeaderNames(job) {
		names, err := jobspec.SecretReferences(job.GetTarget().GetHttp().GetHeaders()[header])
		if err != nil {
			continue // malformed: Validate has said so
		}
		field := fmt.Sprintf("target.http.headers[%q]", header)
		for _, name := range uniq(names) {
			if s.secrets == nil {
				vs = append(vs, jobspec.FieldViolation{Field: field, Description: fmt.Sprintf("references secret %q, and this api has no secret catalog (--secrets-dir), so no tenant has secrets", name)})
				continue
			}
			ok, err := s.secrets.Has(tenant, name)
			if err != nil {
				s.logger.Error("secret catalog unreadable", "tenant", tenant, "secret", name, "err", err)
				return status.Error(codes.Unavailable, "the secret catalog cannot be read; try again")
			}
			if !ok {
				vs = append(vs, jobspec.FieldViolation{Field: field, Description: fmt.Sprintf("references secret %q, which this tenant does not have (secrets are per tenant; ask the operators to add it)", name)})
			}
		}
	}
	if len(vs) > 0 {
		return invalid(vs...)
	}
	return nil
}

func sortedHeaderNames(job *sundialv1.Job) []string {
	h := job.GetTarget().GetHttp().GetHeaders()
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

func uniq(names []string) []string {
	slices.Sort(names)
	return slices.Compact(names)
}
