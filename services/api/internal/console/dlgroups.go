package console

import (
	"context"
	"fmt"
	"net/url"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// groupsShown is how many values of each grouping the page lists.
const groupsShown = 10

// groupings are the dead-letter page's groupings counted in Postgres.
// The host is the target's as the worker stores it with each dead letter
// (firing.TargetHost, migration 00029); NULL for rows written before it
// was stored and not filled in yet (fillHosts).
var groupings = []struct{ name, col string }{{"Class", "d.error_class"}, {"Job", "d.job_id::text"}, {"Host", "d.target_host"}}

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
// sample — by error class, by job and by target host, in Postgres: each
// grouping is one index-only scan over the tenant's range (the class's,
// when the filter names one) of dead_letters_tenant_class_job (migration
// 00024; class and job) or dead_letters_tenant_host (00029; host),
// reading no envelope, and returns its largest groupsShown with the
// number of groups and of dead letters in all.
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
			var (
				gr  group
				key *string
			)
			if err := rows.Scan(&key, &gr.Count, &set.Groups, &set.Total); err != nil {
				rows.Close()
				return nil, fmt.Errorf("console: dead-letter groups: %w", err)
			}
			if key == nil {
				gr.Unrecorded = true
			} else {
				gr.Key = *key
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

// A dead letter written before the worker stored its target's host
// (before migration 00029, or by a worker of the release before it during
// a rolling deploy) has a NULL target_host; the host is in its envelope.
// The sweep fills them in, hostFillBatch rows a statement and at most
// hostFillBatches statements a sweep (10,000 a minute at the default
// SweepInterval, per api replica), so a large backlog never holds the
// table or the sweep for long. Until a row is filled the page counts it
// in one group, "recorded before hosts were stored".
const (
	hostFillBatch   = 1000
	hostFillBatches = 10
)

// fillHosts fills in up to hostFillBatches batches of target hosts and
// returns how many rows it filled.
func (c *Console) fillHosts(ctx context.Context) (int, error) {
	filled := 0
	for range hostFillBatches {
		n, err := c.fillHostBatch(ctx)
		filled += n
		if err != nil || n < hostFillBatch {
			return filled, err
		}
	}
	return filled, nil
}

// hostsToFillSQL finds a batch of rows without their host.
const hostsToFillSQL = `SELECT execution_id::text, envelope FROM dead_letters
	WHERE target_host IS NULL LIMIT $1 FOR UPDATE SKIP LOCKED`

// fillHostBatch fills one batch in a transaction of its own. The rows are
// found through dead_letters_host_unknown (the NULL rows only, no read of
// the table) and locked with SKIP LOCKED, so api replicas sweeping at
// once fill different rows, and a worker re-writing a row waits for one
// short transaction at most. An envelope that does not decode gets the
// empty host ("–" on the page, as a target without a host), so it is not
// read again at every sweep.
func (c *Console) fillHostBatch(ctx context.Context) (int, error) {
	tx, err := c.cfg.Pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("console: fill dead letters' hosts: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, hostsToFillSQL, hostFillBatch)
	if err != nil {
		return 0, fmt.Errorf("console: fill dead letters' hosts: %w", err)
	}
	var ids, hosts []string
	for rows.Next() {
		var (
			id  string
			env []byte
		)
		if err := rows.Scan(&id, &env); err != nil {
			rows.Close()
			return 0, fmt.Errorf("console: fill dead letters' hosts: %w", err)
		}
		host := ""
		if f, err := firing.Decode(env); err == nil {
			host = firing.TargetHost(f.GetTarget())
		}
		ids, hosts = append(ids, id), append(hosts, host)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("console: fill dead letters' hosts: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if _, err := tx.Exec(ctx, `UPDATE dead_letters d SET target_host = u.host
		FROM unnest($1::uuid[], $2::text[]) AS u(id, host) WHERE d.execution_id = u.id AND d.target_host IS NULL`, ids, hosts); err != nil {
		return 0, fmt.Errorf("console: fill dead letters' hosts: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("console: fill dead letters' hosts: %w", err)
	}
	return len(ids), nil
}
