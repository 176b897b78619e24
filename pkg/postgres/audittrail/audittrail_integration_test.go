//go:build integration

package audittrail_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// seed appends one change to every trail of acme, a minute apart (job,
// token, signing key, calendar, then a job change by another actor), and
// one of another tenant.
func seed(t *testing.T, pool *pgxpool.Pool) (job string) {
	t.Helper()
	ctx := context.Background()
	job = uuid.NewString()
	recs := []audittrail.Record{
		{Kind: audittrail.KindJob, Subject: job, Actor: "acme/ci", Action: "create", Version: 1, Detail: map[string]any{"name": "nightly"}},
		{Kind: audittrail.KindToken, Subject: "0123456789abcdef", Actor: "acme/admin", Action: "create"},
		{Kind: audittrail.KindSigningKey, Subject: "k1", Actor: "acme/admin", Action: "rotate", Detail: map[string]string{"rotated_out": "k0"}},
		{Kind: audittrail.KindCalendar, Subject: "holidays", Actor: "acme/ci", Action: "update", Version: 2},
		{Kind: audittrail.KindJob, Subject: job, Actor: "acme/admin", Action: "redrive", Version: 1},
	}
	for i, r := range recs {
		r.Tenant, r.At = "acme", t0.Add(time.Duration(i)*time.Minute)
		require.NoError(t, audittrail.Append(ctx, pool, r))
	}
	require.NoError(t, audittrail.Append(ctx, pool, audittrail.Record{Kind: audittrail.KindToken, Tenant: "other", Subject: "fedcba9876543210", Actor: "other/admin", Action: "create", At: t0}))
	return job
}

func kindsAndActions(es []audittrail.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, string(e.Kind)+":"+e.Action)
	}
	return out
}

func TestListMergesEveryTrailWithFilters(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	job := seed(t, pool)

	all, err := audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Limit: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"job:redrive", "calendar:update", "signing-key:rotate", "token:create", "job:create"}, kindsAndActions(all),
		"every trail of acme, newest first, and nothing of another tenant")
	require.Equal(t, job, all[0].Subject)
	require.EqualValues(t, 2, all[1].Version)
	var detail map[string]string
	require.NoError(t, json.Unmarshal([]byte(all[2].Detail), &detail))
	require.Equal(t, "k0", detail["rotated_out"])

	byActor, err := audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Actor: "acme/ci", Limit: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"calendar:update", "job:create"}, kindsAndActions(byActor))

	byKind, err := audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Kinds: []audittrail.Kind{audittrail.KindToken, audittrail.KindSigningKey}, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"signing-key:rotate", "token:create"}, kindsAndActions(byKind))

	byTime, err := audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Since: t0.Add(time.Minute), Until: t0.Add(3 * time.Minute), Limit: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"signing-key:rotate", "token:create"}, kindsAndActions(byTime), "since inclusive, until exclusive")

	oneJob, err := audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Kinds: []audittrail.Kind{audittrail.KindJob}, Subject: job, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"job:redrive", "job:create"}, kindsAndActions(oneJob))

	byAction, err := audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Action: "create", Limit: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"token:create", "job:create"}, kindsAndActions(byAction), "every trail read, one action kept")
	redrives, err := audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Action: "redrive", Limit: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"job:redrive"}, kindsAndActions(redrives))
	created, err := audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Action: "create", Actor: "acme/ci", Limit: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"job:create"}, kindsAndActions(created), "action and actor together")
	none, err := audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Action: "no_such_action", Limit: 100})
	require.NoError(t, err)
	require.Empty(t, none)
	_, err = audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Action: "Re-Drive", Limit: 10})
	require.ErrorContains(t, err, "action")

	_, err = audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Kinds: []audittrail.Kind{audittrail.KindJob}, Subject: "nightly", Limit: 10})
	require.ErrorContains(t, err, "subject")
	_, err = audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Limit: 0})
	require.ErrorContains(t, err, "limit")
}

// Pages read with the cursor neither repeat nor skip an entry, even with
// entries appended between pages, at the same instant as the cursor's
// entry included (the tie-break by kind and sequence).
func TestListCursorIsStableAcrossAppends(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	// Twelve entries, three trails, four instants: ties at every instant.
	for i := range 12 {
		k := []audittrail.Kind{audittrail.KindToken, audittrail.KindSigningKey, audittrail.KindCalendar}[i%3]
		r := audittrail.Record{Kind: k, Tenant: "acme", Subject: "s" + string(rune('a'+i)), Actor: "acme/admin", Action: "create", At: t0.Add(time.Duration(i/3) * time.Second)}
		if k == audittrail.KindCalendar {
			r.Version, r.Action = 1, "update"
		}
		require.NoError(t, audittrail.Append(ctx, pool, r))
	}
	want, err := audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Limit: 100})
	require.NoError(t, err)
	require.Len(t, want, 12)

	var got []audittrail.Entry
	var after audittrail.Cursor
	scope := map[string]string{"t": "acme"}
	for page := 0; ; page++ {
		es, err := audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", After: after, Limit: 5})
		require.NoError(t, err)
		got = append(got, es...)
		if len(es) < 5 {
			break
		}
		// Entries appended between pages, now and at the instant of the
		// page's last entry, land before the cursor: never in a later page.
		require.NoError(t, audittrail.Append(ctx, pool, audittrail.Record{Kind: audittrail.KindToken, Tenant: "acme", Subject: "new", Actor: "acme/admin", Action: "revoke"}))
		require.NoError(t, audittrail.Append(ctx, pool, audittrail.Record{Kind: audittrail.KindJob, Tenant: "acme", Subject: uuid.NewString(), Actor: "acme/admin", Action: "update", Version: 2, At: t0.Add(4 * time.Second)}))
		// Through the page token, as a caller holds it.
		after, err = audittrail.Decode(es[len(es)-1].Cursor(scope).Encode(), scope)
		require.NoError(t, err)
	}
	require.Equal(t, len(want), len(got))
	for i := range want {
		require.Equal(t, want[i].Kind, got[i].Kind, "entry %d", i)
		require.Equal(t, want[i].Seq, got[i].Seq, "entry %d", i)
	}
}

func TestTrailPagesOneTrailBySequence(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	job := seed(t, pool)
	es, err := audittrail.Trail(ctx, pool, audittrail.KindJob, "acme", job, 0, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"job:redrive"}, kindsAndActions(es))
	es, err = audittrail.Trail(ctx, pool, audittrail.KindJob, "acme", job, es[0].Seq, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"job:create"}, kindsAndActions(es))
	es, err = audittrail.Trail(ctx, pool, audittrail.KindToken, "other", "", 0, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"token:create"}, kindsAndActions(es))
}

// InsertFrom's head takes a set-based writer's SELECT in its column order.
func TestInsertFromAuditsManyRowsInOneStatement(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	a, b := uuid.New(), uuid.New()
	_, err := pool.Exec(ctx, audittrail.InsertFrom(audittrail.KindJob)+
		`SELECT id, 'acme', 'system:test', 'purge', 3, '{}'::jsonb FROM unnest($1::uuid[]) AS id`, []uuid.UUID{a, b})
	require.NoError(t, err)
	es, err := audittrail.List(ctx, pool, audittrail.Query{Tenant: "acme", Actor: "system:test", Limit: 10})
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.EqualValues(t, 3, es[0].Version)
}

// capture is a Querier that records the statement List sends instead of
// running it, so the test can ask Postgres for its plan.
type capture struct {
	audittrail.Querier
	sql  string
	args []any
}

func (c *capture) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.sql, c.args = sql, args
	return nil, errors.New("captured")
}

// Every trail's part of the merged read can be an ordered index scan of
// the migration 00025 indexes (with or without an actor) that its LIMIT
// stops, and none is a sequential scan. Sequential and bitmap scans and
// sorts are disabled so that a missing or misshapen index shows on
// tables this small, where the planner would otherwise scan anyway.
func TestListReadsEachTrailByIndex(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	for _, q := range []audittrail.Query{
		{Tenant: "acme", Limit: 51},
		{Tenant: "acme", Actor: "acme/ci", Since: t0, Limit: 51},
		{Tenant: "acme", Limit: 51, After: audittrail.Cursor{Seq: 9, At: t0, Kind: audittrail.KindSigningKey}},
	} {
		c := &capture{}
		_, err := audittrail.List(ctx, c, q)
		require.ErrorContains(t, err, "captured")
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		for _, off := range []string{"enable_seqscan", "enable_bitmapscan", "enable_sort"} {
			_, err = tx.Exec(ctx, "SET LOCAL "+off+" = off")
			require.NoError(t, err)
		}
		rows, err := tx.Query(ctx, "EXPLAIN "+c.sql, c.args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		plan := strings.Join(lines, "\n")
		require.NotContains(t, plan, "Seq Scan", plan)
		suffix := "_tenant_at"
		if q.Actor != "" {
			suffix = "_tenant_actor_at"
		}
		for _, table := range []string{"job_audit", "token_audit", "signing_key_audit", "calendar_audit"} {
			require.Contains(t, plan, "Index Scan using "+table+suffix+" on "+table, plan)
		}
	}
}
