package console

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sundialhq/sundial/pkg/domain/auth"
)

// Job names come from the api's Postgres (the jobs table), which the
// console already reads for its sessions: the api's messages about
// dead letters and executions carry a job's id only, and one GetJob per
// row would be a call per row. The reads are the session's tenant's rows
// (an operator's, whose dead letters span every tenant, any tenant's by
// id), bounded and served by an index (migration 00024).

var jobIDText = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// namesFor returns the names of the jobs with these ids (a purged job,
// or another tenant's, has none: the page shows its id).
func (c *Console) namesFor(ctx context.Context, s *session, ids []string) map[string]string {
	out := map[string]string{}
	seen := map[string]bool{}
	var want []string
	for _, id := range ids {
		if jobIDText.MatchString(id) && !seen[id] {
			seen[id] = true
			want = append(want, id)
		}
	}
	if len(want) == 0 {
		return out
	}
	tenant := s.Tenant
	if s.role == auth.RoleOperator {
		tenant = "" // its lists hold every tenant's ids, each from the api
	}
	rows, err := c.cfg.Pool.Query(ctx, `SELECT id::text, name FROM jobs WHERE id = ANY($1::uuid[]) AND ($2 = '' OR tenant = $2)`, want, tenant)
	if err != nil {
		c.cfg.Logger.WarnContext(ctx, "console: job names not read", "err", err)
		return out
	}
	type pair struct{ ID, Name string }
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pair])
	if err != nil {
		c.cfg.Logger.WarnContext(ctx, "console: job names not read", "err", err)
		return out
	}
	for _, p := range got {
		if p.Name != "" {
			out[p.ID] = p.Name
		}
	}
	return out
}

// jobRef is a job a name filter matched, and the filter's URL for it.
type jobRef struct{ ID, Name, Link string }

// prefixMatches is how many jobs a name filter offers when its text
// matches more than one.
const prefixMatches = 20

// jobChoice is what a job filter's text (an id, or the start of a name)
// resolved to: one job's id, or the jobs it could mean.
type jobChoice struct {
	// Text is what was typed.
	Text string
	// ID is the job filtered by ("" for none).
	ID, Name string
	// Choices are the jobs whose names start with Text when it is not
	// one job's, at most prefixMatches; More says there are others.
	Choices []jobRef
	More    bool
	// None says no job's name starts with Text.
	None bool
}

// resolveJob reads a job filter: an id is taken as it is; any other text
// is the start of a name, ignoring case, in the session's tenant. One
// match, or a name equal to the text, is filtered by; several are
// offered (the first prefixMatches in name order).
func (c *Console) resolveJob(ctx context.Context, s *session, text string) (jobChoice, error) {
	ch := jobChoice{Text: strings.TrimSpace(text)}
	switch {
	case ch.Text == "":
		return ch, nil
	case jobIDText.MatchString(ch.Text):
		ch.ID = strings.ToLower(ch.Text)
		ch.Name = c.namesFor(ctx, s, []string{ch.ID})[ch.ID]
		return ch, nil
	}
	matches, err := c.jobsByPrefix(ctx, s.Tenant, ch.Text, prefixMatches+1)
	if err != nil {
		return ch, err
	}
	for _, m := range matches {
		if strings.EqualFold(m.Name, ch.Text) {
			ch.ID, ch.Name = m.ID, m.Name
			return ch, nil
		}
	}
	switch len(matches) {
	case 0:
		ch.None = true
	case 1:
		ch.ID, ch.Name = matches[0].ID, matches[0].Name
	default:
		ch.More = len(matches) > prefixMatches
		ch.Choices = matches[:min(len(matches), prefixMatches)]
	}
	return ch, nil
}

// jobsByPrefixSQL is the prefix read: a range of jobs_tenant_name_prefix
// (tenant, lower(name) COLLATE "C"), in its order, so it reads the rows
// it returns and no more however many jobs the tenant has or match.
const jobsByPrefixSQL = `SELECT id::text, name FROM jobs
 WHERE tenant = $1
   AND lower(name) COLLATE "C" >= lower($2::text) COLLATE "C"
   AND lower(name) COLLATE "C" < (lower($2::text) || U&'\+10FFFF') COLLATE "C"
 ORDER BY lower(name) COLLATE "C" LIMIT $3`

func (c *Console) jobsByPrefix(ctx context.Context, tenant, prefix string, limit int) ([]jobRef, error) {
	rows, err := c.cfg.Pool.Query(ctx, jobsByPrefixSQL, tenant, prefix, limit)
	if err != nil {
		return nil, fmt.Errorf("console: jobs by name: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (jobRef, error) {
		var j jobRef
		return j, r.Scan(&j.ID, &j.Name)
	})
	if err != nil {
		return nil, fmt.Errorf("console: jobs by name: %w", err)
	}
	return out, nil
}

// withLinks gives each choice the page's own URL with the job filter
// set to it (and paging reset).
func (ch *jobChoice) withLinks(path string, q url.Values) {
	for i := range ch.Choices {
		nq := url.Values{}
		for k, v := range q {
			if k != "page" {
				nq[k] = v
			}
		}
		nq.Set("job", ch.Choices[i].ID)
		ch.Choices[i].Link = path + "?" + nq.Encode()
	}
}
