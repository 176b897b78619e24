package console

import (
	"context"
	"fmt"
	"net/url"

	"github.com/sundialhq/sundial/pkg/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// groupsShown is how many values of each grouping the page lists.
const groupsShown = 10

// groupings are the dead-letter page's groupings counted in Postgres.
var groupings = []struct{ name, col string }{{"Class", "d.error_class"}, {"Job", "d.job_id::text"}}

// deadLetterGroupsWhere is the filter's conditions on dead_letters d, the
// ones the api applies to the list (store.DeadLetterFilter.where): the
// tenant (every tenant for an operator, as the api lists its dead
// letters), the job, the class, and re-driven rows only when asked.
func deadLetterGroupsWhere(s *session, f *sundialv1.DeadLetterFilter) (string, []any) {
	where, args := `true`, []any{}
	add := func(cond string, v any) {
		args = append(args, v)
		where += fmt.Sprintf(` AND `+cond, len(args))
	}
	if s.role != auth.RoleOperator {
		add(`d.tenant = $%d`, s.Tenant)
	}
	if f.GetJobId() != "" {
		add(`d.job_id = $%d::uuid`, f.GetJobId())
	}
	if f.GetErrorClass() != "" {
		add(`d.error_class = $%d`, f.GetErrorClass())
	}
	if !f.GetIncludeRedriven() {
		where += ` AND (d.redriven_at IS NULL OR d.redriven_at < d.dead_at)`
	}
	return where, args
}

// deadLetterGroups counts every dead letter the filter matches — not a
// sample — by error class and by job, in Postgres: each grouping is one
// index-only scan of dead_letters_tenant_class_job (migration 00024) over
// the tenant's range (the class's, when the filter names one), reading
// no envelope, and returns its largest groupsShown with the number of
// groups and of dead letters in all.
func (c *Console) deadLetterGroups(ctx context.Context, s *session, f *sundialv1.DeadLetterFilter, q url.Values) (map[string]groupSet, error) {
	where, args := deadLetterGroupsWhere(s, f)
	out := map[string]groupSet{}
	for _, g := range groupings {
		rows, err := c.cfg.Pool.Query(ctx, deadLetterGroupSQL(g.col, where), args...)
		if err != nil {
			return nil, fmt.Errorf("console: dead-letter groups: %w", err)
		}
		var set groupSet
		for rows.Next() {
			var gr group
			if err := rows.Scan(&gr.Key, &gr.Count, &set.Groups, &set.Total); err != nil {
				rows.Close()
				return nil, fmt.Errorf("console: dead-letter groups: %w", err)
			}
			set.Shown = append(set.Shown, gr)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("console: dead-letter groups: %w", err)
		}
		out[g.name] = set
	}
	// Links keep the rest of the filter; the job's group shows its name.
	link := func(key, value string) string {
		nq := url.Values{}
		for k, v := range q {
			if k != "page" {
				nq[k] = v
			}
		}
		nq.Set(key, value)
		return "/dead-letters?" + nq.Encode()
	}
	jobs := out["Job"]
	ids := make([]string, 0, len(jobs.Shown))
	for _, g := range jobs.Shown {
		ids = append(ids, g.Key)
	}
	names := c.namesFor(ctx, s, ids)
	for i := range jobs.Shown {
		jobs.Shown[i].Link = link("job", jobs.Shown[i].Key)
		jobs.Shown[i].Name = names[jobs.Shown[i].Key]
	}
	for i := range out["Class"].Shown {
		out["Class"].Shown[i].Link = link("class", out["Class"].Shown[i].Key)
	}
	return out, nil
}

// deadLetterGroupSQL counts the dead letters matching where by col: the
// largest groupsShown groups, and with each row the number of groups and
// of dead letters in all.
func deadLetterGroupSQL(col, where string) string {
	return `SELECT k, n, count(*) OVER (), sum(n) OVER ()::bigint FROM (
	  SELECT ` + col + ` AS k, count(*) AS n FROM dead_letters d WHERE ` + where + ` GROUP BY 1) g
	ORDER BY n DESC, k LIMIT ` + fmt.Sprint(groupsShown)
}

// groupSet is one grouping: its largest groups, how many groups there
// are, and how many dead letters they hold in all.
type groupSet struct {
	Shown         []group
	Groups, Total int64
}
