package console

import sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

// The console's own Postgres reads, for the query-plan tests.

// JobsByPrefixSQL is the job filter's read of names by their start.
const JobsByPrefixSQL = jobsByPrefixSQL

// DeadLetterGroupQueries are the dead-letter page's group counts for a
// tenant's session and a filter, each with its arguments.
func DeadLetterGroupQueries(tenant, jobID, class string) [][]any {
	where, args := deadLetterGroupsWhere(&session{Tenant: tenant, role: "admin"}, &sundialv1.DeadLetterFilter{JobId: jobID, ErrorClass: class})
	var out [][]any
	for _, g := range groupings {
		out = append(out, append([]any{deadLetterGroupSQL(g.col, where)}, args...))
	}
	return out
}
