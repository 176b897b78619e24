package console

import sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

// The console's own Postgres reads, for the query-plan tests.

// JobsByPrefixSQL is the job filter's read of names by their start.
const JobsByPrefixSQL = jobsByPrefixSQL

// DeadLetterGroupQueries are the dead-letter page's group counts for a
// tenant's session and a filter, by grouping ("Class", "Job", "Host"),
// each the SQL followed by its arguments.
func DeadLetterGroupQueries(tenant, jobID, class string) map[string][]any {
	where, args := deadLetterGroupsWhere(&session{Tenant: tenant, role: "admin"}, &sundialv1.DeadLetterFilter{JobId: jobID, ErrorClass: class})
	out := map[string][]any{}
	for _, g := range groupings {
		out[g.name] = append([]any{deadLetterGroupSQL(g.col, where)}, args...)
	}
	return out
}

// HostsToFillSQL is the sweep's read of a batch of dead letters whose
// target host is not stored yet ($1: the batch's size).
const HostsToFillSQL = hostsToFillSQL
