package audittrail

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// MaxLimit bounds a read of Trail or List: the largest page an RPC
// serves (1000) and the one more entry that says whether there is a next.
const MaxLimit = 1001

// actionWord is what an action filter may be: the writers' words are
// lower-case, with _ between words.
var actionWord = regexp.MustCompile(`^[a-z][a-z_]{0,31}$`)

// CheckAction says why a is not an action word a filter may name (nil
// when it is one). A word no writer records is not an error: it matches
// nothing.
func CheckAction(a string) error {
	if !actionWord.MatchString(a) {
		return fmt.Errorf("%q is not an action word (lower-case letters and _, at most 32)", a)
	}
	return nil
}

// Entry is one change read back from a trail.
type Entry struct {
	Kind Kind
	// Seq is the entry's sequence in its trail (the table's id).
	Seq     int64
	Tenant  string
	Subject string
	Actor   string
	Action  string
	// Version is 0 on a trail without versions.
	Version int64
	At      time.Time
	// Detail is the entry's JSON object, as text.
	Detail string
}

// Cursor is the position after e, for the next page of the merged view.
func (e Entry) Cursor(scope map[string]string) Cursor {
	return Cursor{Seq: e.Seq, At: e.At, Kind: e.Kind, Scope: scope}
}

func checkLimit(limit int) error {
	if limit < 1 || limit > MaxLimit {
		return fmt.Errorf("audittrail: limit: %d is not between 1 and %d", limit, MaxLimit)
	}
	return nil
}

// selectFrom is the SELECT of k's rows of the tenant ($1) in the shape
// every reader scans: kind, seq, tenant, subject, actor, action, version,
// at, detail.
func selectFrom(t table, k Kind) string {
	version := "0::bigint"
	if t.versioned {
		version = "version"
	}
	return fmt.Sprintf(`SELECT '%s'::text AS kind, id, tenant, %s::text AS subject, actor, action, %s AS version, at, detail::text AS detail FROM %s WHERE tenant = %s`,
		k, t.subject, version, t.name, "$1")
}

// arg appends v to args and returns its placeholder.
func arg(args *[]any, v any) string {
	*args = append(*args, v)
	return fmt.Sprintf("$%d", len(*args))
}

// subjectIs compares the subject column with placeholder p, as a uuid
// for jobs so that the (tenant, job_id, id) index serves it.
func subjectIs(t table, k Kind, p string) string {
	if k == KindJob {
		p += "::uuid"
	}
	return t.subject + " = " + p
}

func scan(rows pgx.Rows) ([]Entry, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		var e Entry
		err := r.Scan(&e.Kind, &e.Seq, &e.Tenant, &e.Subject, &e.Actor, &e.Action, &e.Version, &e.At, &e.Detail)
		return e, err
	})
}

// Trail returns up to limit of the entries of tenant's k trail (of
// subject only, unless ""), newest first by sequence, those before the
// sequence before (0: from the newest). It walks the trail's
// (tenant, id) or (tenant, subject, id) index.
func Trail(ctx context.Context, db Querier, k Kind, tenant, subject string, before int64, limit int) ([]Entry, error) {
	t, err := tableOf(k)
	if err != nil {
		return nil, err
	}
	if tenant == "" {
		return nil, errors.New("audittrail: tenant: is required")
	}
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	args := []any{tenant}
	sql := selectFrom(t, k)
	if subject != "" {
		sql += " AND " + subjectIs(t, k, arg(&args, subject))
	}
	if before > 0 {
		sql += " AND id < " + arg(&args, before)
	}
	sql += " ORDER BY id DESC LIMIT " + arg(&args, limit)
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("audittrail: read the %s trail: %w", k, err)
	}
	out, err := scan(rows)
	if err != nil {
		return nil, fmt.Errorf("audittrail: read the %s trail: %w", k, err)
	}
	return out, nil
}

// Query selects a page of the merged view.
type Query struct {
	// Tenant is required: a view is one tenant's.
	Tenant string
	// Kinds are the trails to read; none reads every trail.
	Kinds []Kind
	// Subject, with exactly one kind, keeps that job's, token's, key's
	// or calendar's entries.
	Subject string
	// Actor keeps one actor's entries (exact).
	Actor string
	// Action keeps one action's entries ("redrive", "cancel", "pause",
	// …: the words the writers record), in every trail read.
	Action string
	// Since and Until keep entries at Since or later and before Until;
	// zero leaves that side open.
	Since, Until time.Time
	// After continues after a previous page's last entry (its Cursor);
	// the zero Cursor starts at the newest.
	After Cursor
	Limit int
}

// Validate names the first field of q that is wrong.
func (q Query) Validate() error {
	if q.Tenant == "" {
		return errors.New("audittrail: tenant: is required")
	}
	for _, k := range q.Kinds {
		if _, err := tableOf(k); err != nil {
			return err
		}
	}
	if q.Action != "" {
		if err := CheckAction(q.Action); err != nil {
			return fmt.Errorf("audittrail: action: %w", err)
		}
	}
	if q.Subject != "" && len(q.Kinds) != 1 {
		return errors.New("audittrail: subject: needs exactly one kind")
	}
	if q.Subject != "" && q.Kinds[0] == KindJob {
		if _, err := uuid.Parse(q.Subject); err != nil {
			return fmt.Errorf("audittrail: subject: %q is not a job id", q.Subject)
		}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return fmt.Errorf("audittrail: until: %s is not after since %s", q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))
	}
	if q.After.Seq != 0 && q.After.At.IsZero() {
		return errors.New("audittrail: after: is a per-trail cursor, not one of the merged view")
	}
	return checkLimit(q.Limit)
}

// List returns up to q.Limit entries of the trails q selects, merged and
// newest first: ordered by instant, then kind, then sequence, all
// descending, so the order is total and a cursor stays exact however
// many entries are appended meanwhile (a new entry lands before the
// cursor, never inside a page not yet read). Each trail is read by its
// own LIMITed index scan, (tenant, at, id), with an actor
// (tenant, actor, at, id), with an action (tenant, action, at, id), and
// the merge reads at most Limit rows of each.
func List(ctx context.Context, db Querier, q Query) ([]Entry, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	kinds := q.Kinds
	if len(kinds) == 0 {
		kinds = Kinds
	}
	args := []any{q.Tenant}
	limit := arg(&args, q.Limit)
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		t := tables[k]
		sql := selectFrom(t, k)
		if q.Subject != "" {
			sql += " AND " + subjectIs(t, k, arg(&args, q.Subject))
		}
		if q.Actor != "" {
			sql += " AND actor = " + arg(&args, q.Actor)
		}
		if q.Action != "" {
			sql += " AND action = " + arg(&args, q.Action)
		}
		if !q.Since.IsZero() {
			sql += " AND at >= " + arg(&args, q.Since)
		}
		if !q.Until.IsZero() {
			sql += " AND at < " + arg(&args, q.Until)
		}
		if c := q.After; c.Seq != 0 {
			// After (c.At, c.Kind, c.Seq) in (at, kind, id) descending
			// order, with this trail's kind a constant.
			at := arg(&args, c.At)
			switch {
			case k < c.Kind:
				sql += " AND at <= " + at
			case k == c.Kind:
				sql += " AND (at, id) < (" + at + ", " + arg(&args, c.Seq) + ")"
			default:
				sql += " AND at < " + at
			}
		}
		parts = append(parts, "("+sql+" ORDER BY at DESC, id DESC LIMIT "+limit+")")
	}
	sql := "SELECT * FROM (" + strings.Join(parts, "\nUNION ALL\n") + ") merged\nORDER BY at DESC, kind COLLATE \"C\" DESC, id DESC LIMIT " + limit
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("audittrail: list: %w", err)
	}
	out, err := scan(rows)
	if err != nil {
		return nil, fmt.Errorf("audittrail: list: %w", err)
	}
	return out, nil
}
