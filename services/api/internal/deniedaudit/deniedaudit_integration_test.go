//go:build integration

package deniedaudit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type auditRow struct {
	code, method, source, tenant, actor, tokenID, fingerprint string
	suppressed                                                int64
}

func readRows(t *testing.T, r *Recorder) []auditRow {
	t.Helper()
	rows, err := r.cfg.Pool.Query(context.Background(), `SELECT code, method, source, tenant, actor, token_id, fingerprint, suppressed FROM access_denied_audit ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []auditRow
	for rows.Next() {
		var a auditRow
		require.NoError(t, rows.Scan(&a.code, &a.method, &a.source, &a.tenant, &a.actor, &a.tokenID, &a.fingerprint, &a.suppressed))
		out = append(out, a)
	}
	require.NoError(t, rows.Err())
	return out
}

func newRecorder(t *testing.T, clk clock.Clock, reg prometheus.Registerer) *Recorder {
	t.Helper()
	pool := pgtest.Migrated(t)
	r, err := New(Config{Pool: pool, Clock: clk, Registry: reg, PerCaller: 5, Total: 50})
	require.NoError(t, err)
	return r
}

// A flood of refused calls from one caller writes PerCaller rows and, when
// its window ends, one row counting the rest; another caller keeps its
// own rows; Record never waits for Postgres.
func TestFloodIsSampled(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	r := newRecorder(t, clk, reg)
	ctx := context.Background()
	flood := auth.Refusal{Method: "/sundial.v1.JobService/GetJob", Code: codes.Unauthenticated, Source: "192.0.2.7", Fingerprint: "abc123abc123"}
	t0 := time.Now()
	for i := range 1000 {
		f := flood
		f.Fingerprint = fmt.Sprintf("%012x", i) // a new random token each time: still one caller
		r.Record(ctx, f)
	}
	require.Less(t, time.Since(t0), time.Second, "Record must not wait")
	denied := auth.Refusal{Method: "/sundial.v1.JobService/CreateJob", Code: codes.PermissionDenied, Source: "192.0.2.8",
		Principal: auth.Principal{Tenant: "acme", Actor: "acme/viewer", Role: auth.RoleReadOnly, TokenID: "0123456789abcdef"}, TokenID: "0123456789abcdef", Fingerprint: "fff"}
	r.Record(ctx, denied)
	r.Record(ctx, auth.Refusal{Method: "/x", Code: codes.InvalidArgument}) // not a refusal this trail keeps
	require.NoError(t, r.Flush(ctx))
	rows := readRows(t, r)
	require.Len(t, rows, 6)
	for _, row := range rows[:5] {
		require.Equal(t, "Unauthenticated", row.code)
		require.Equal(t, "192.0.2.7", row.source)
		require.Zero(t, row.suppressed)
	}
	require.Equal(t, auditRow{code: "PermissionDenied", method: "/sundial.v1.JobService/CreateJob", source: "192.0.2.8", tenant: "acme",
		actor: "acme/viewer", tokenID: "0123456789abcdef", fingerprint: "fff"}, rows[5])

	// The window ends: one row says how many were left out.
	clk.Advance(DefaultWindow)
	require.NoError(t, r.Flush(ctx))
	rows = readRows(t, r)
	require.Len(t, rows, 7)
	require.Equal(t, int64(995), rows[6].suppressed)
	require.Equal(t, "192.0.2.7", rows[6].source)
	require.Equal(t, 995.0, testutil.ToFloat64(r.rows.WithLabelValues("suppressed")))
	require.Equal(t, 7.0, testutil.ToFloat64(r.rows.WithLabelValues("written")))

	// A new window, new rows.
	r.Record(ctx, flood)
	require.NoError(t, r.Flush(ctx))
	require.Len(t, readRows(t, r), 8)
}

// Many callers at once are bounded by Total.
func TestTotalBound(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	r := newRecorder(t, clk, nil)
	ctx := context.Background()
	for i := range 500 {
		r.Record(ctx, auth.Refusal{Method: "/m", Code: codes.Unauthenticated, Source: fmt.Sprintf("198.51.100.%d", i%250), Fingerprint: "f"})
	}
	require.NoError(t, r.Flush(ctx))
	require.Len(t, readRows(t, r), 50)
	clk.Advance(DefaultWindow)
	require.NoError(t, r.Flush(ctx))
	// One closing row per caller that lost any: 250 callers, 50 kept
	// their first call in the trail.
	require.Len(t, readRows(t, r), 50+250)
}

// The loop writes in the background and prunes rows past Retention;
// Stop writes what is left.
func TestLoopWritesAndPrunes(t *testing.T) {
	r := newRecorder(t, clock.Real{}, nil)
	ctx := context.Background()
	_, err := r.cfg.Pool.Exec(ctx, `INSERT INTO access_denied_audit (at, code, method) VALUES (now() - interval '40 days', 'Unauthenticated', '/old')`)
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	r.Record(ctx, auth.Refusal{Method: "/new", Code: codes.Unauthenticated, Source: "192.0.2.1"})
	require.Eventually(t, func() bool {
		rows := readRows(t, r)
		return len(rows) == 1 && rows[0].method == "/new"
	}, 10*time.Second, 50*time.Millisecond)
	r.Record(ctx, auth.Refusal{Method: "/last", Code: codes.Unauthenticated, Source: "192.0.2.1"})
	r.Stop()
	rows := readRows(t, r)
	require.Len(t, rows, 2)
	require.Equal(t, "/last", rows[1].method)
}
