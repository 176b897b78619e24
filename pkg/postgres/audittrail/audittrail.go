// Package audittrail is the one home of the platform's change trails:
// who changed a job, a token, a signing key or a calendar, what they did
// and when. Each trail keeps its own table (job_audit, token_audit,
// signing_key_audit, calendar_audit; DESIGN.md says why they stay apart),
// and this package is the only code that writes or reads them: Append (or
// Queue, for a pgx.Batch; InsertFrom for a set-based statement that
// audits many rows at once) inside the change's own transaction, so a
// trail holds exactly the changes that committed; Trail to page one
// trail by its sequence, as the deprecated per-trail RPCs always have;
// List for every trail merged, newest first, filtered by kind, actor,
// subject and time, paged by one keyset Cursor (the api's ListAudit and
// the console's audit page).
//
// Detail is a JSON object that never holds a value that may be a secret
// (header values, payloads, key material): a caller records the paths it
// changed, ids and counts.
package audittrail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Kind names a trail: what its entries are changes to.
type Kind string

// The trails. A Kind's string is what the console and the merged view
// show and filter by.
const (
	KindJob        Kind = "job"
	KindToken      Kind = "token"
	KindSigningKey Kind = "signing-key"
	KindCalendar   Kind = "calendar"
)

// Kinds lists every trail, in the merged view's tie-break order.
var Kinds = []Kind{KindCalendar, KindJob, KindSigningKey, KindToken}

// table is where a trail lives. Every trail's table has id (identity,
// the trail's sequence), tenant, actor, action, at and detail (jsonb);
// subject is the column naming what changed, versioned whether the trail
// records the version the change produced.
type table struct {
	name, subject string
	versioned     bool
}

var tables = map[Kind]table{
	KindJob:        {name: "job_audit", subject: "job_id", versioned: true},
	KindToken:      {name: "token_audit", subject: "token_id"},
	KindSigningKey: {name: "signing_key_audit", subject: "key_id"},
	KindCalendar:   {name: "calendar_audit", subject: "calendar", versioned: true},
}

func tableOf(k Kind) (table, error) {
	t, ok := tables[k]
	if !ok {
		return t, fmt.Errorf("audittrail: kind: %q is not a trail (want one of %v)", k, Kinds)
	}
	return t, nil
}

// ParseKind reads a kind as the console and CLI spell it.
func ParseKind(s string) (Kind, error) {
	k := Kind(s)
	if _, err := tableOf(k); err != nil {
		return "", err
	}
	return k, nil
}

// Record is one change a writer appends to its trail.
type Record struct {
	Kind   Kind
	Tenant string
	// Subject is what changed: the job's id, the token's id, the signing
	// key's id or the calendar's name.
	Subject string
	// Actor is who made the change (auth.ActorFrom, or a service's
	// "system:…" name).
	Actor  string
	Action string
	// Version is the version the change produced (jobs, calendars); the
	// other trails have none and must leave it 0.
	Version int64
	// At is the change's instant; zero takes the database's now().
	At time.Time
	// Detail is encoded as a JSON object; nil is {}.
	Detail any
}

// Execer runs a statement: a pgx.Tx, *pgxpool.Pool or *pgx.Conn.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Querier runs a query: a pgx.Tx, *pgxpool.Pool or *pgx.Conn.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Statement returns the INSERT that appends r and its arguments, for a
// caller that sends it itself (Queue does, into a pgx.Batch). A record
// missing its kind, tenant, subject or action, or with a version on a
// trail without versions, is refused before anything is written.
func (r Record) Statement() (string, []any, error) {
	t, err := tableOf(r.Kind)
	if err != nil {
		return "", nil, err
	}
	switch {
	case r.Tenant == "":
		return "", nil, errors.New("audittrail: tenant: is required")
	case r.Subject == "":
		return "", nil, fmt.Errorf("audittrail: subject: the %s trail needs its %s", r.Kind, t.subject)
	case r.Action == "":
		return "", nil, errors.New("audittrail: action: is required")
	case r.Version != 0 && !t.versioned:
		return "", nil, fmt.Errorf("audittrail: version: the %s trail has no versions", r.Kind)
	}
	b, err := json.Marshal(r.Detail)
	if err != nil {
		return "", nil, fmt.Errorf("audittrail: detail: %w", err)
	}
	if string(b) == "null" { // nil, or a nil map of the caller's type
		b = []byte("{}")
	}
	if len(b) == 0 || b[0] != '{' {
		return "", nil, fmt.Errorf("audittrail: detail: must encode as a JSON object, not %.20s", b)
	}
	var at *time.Time
	if !r.At.IsZero() {
		at = &r.At
	}
	args := []any{r.Tenant, r.Subject, r.Actor, r.Action, at, b}
	cols, vals := "tenant, "+t.subject+", actor, action, at, detail", "$1, $2, $3, $4, COALESCE($5::timestamptz, now()), $6"
	if t.versioned {
		cols += ", version"
		vals += ", $7"
		args = append(args, r.Version)
	}
	return "INSERT INTO " + t.name + " (" + cols + ") VALUES (" + vals + ")", args, nil
}

// Append writes r with db, which is the change's own transaction.
func Append(ctx context.Context, db Execer, r Record) error {
	sql, args, err := r.Statement()
	if err != nil {
		return err
	}
	if _, err := db.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("audittrail: append to the %s trail: %w", r.Kind, err)
	}
	return nil
}

// Queue adds r to b, for a writer that audits many changes in one round
// trip (a bulk action, a batch of creates).
func Queue(b *pgx.Batch, r Record) error {
	sql, args, err := r.Statement()
	if err != nil {
		return err
	}
	b.Queue(sql, args...)
	return nil
}

// InsertFrom returns the head of a set-based append to k's trail,
// "INSERT INTO <table> (<subject>, tenant, actor, action, version,
// detail)", for a statement that audits the rows it changes in the same
// statement (completing or purging jobs by the hundred); the caller's
// SELECT supplies the columns in that order (without version for a trail
// that has none). It panics on an unknown kind: the kind is a constant of
// the caller's.
func InsertFrom(k Kind) string {
	t, err := tableOf(k)
	if err != nil {
		panic(err)
	}
	cols := []string{t.subject, "tenant", "actor", "action"}
	if t.versioned {
		cols = append(cols, "version")
	}
	cols = append(cols, "detail")
	return "INSERT INTO " + t.name + " (" + strings.Join(cols, ", ") + ")\n"
}
