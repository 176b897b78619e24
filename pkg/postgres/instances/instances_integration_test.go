//go:build integration

package instances_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/postgres/instances"
	"github.com/sundialhq/sundial/pkg/process/admin"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

func find(t *testing.T, rows []instances.Instance, service, name string) instances.Instance {
	t.Helper()
	for _, r := range rows {
		if r.Service == service && r.Name == name {
			return r
		}
	}
	t.Fatalf("no row for %s %s in %+v", service, name, rows)
	return instances.Instance{}
}

// A reporter writes its instance's row at once and again every interval
// with what each check answered (a failing check named with its error, the
// instance not ready), a second instance has a row of its own, and a
// graceful stop marks the row stopped.
func TestReporterWritesWhatItsChecksAnswer(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	var kafkaDown atomic.Bool
	checks := map[string]admin.Check{
		"postgres": pool.Ping,
		"kafka": func(context.Context) error {
			if kafkaDown.Load() {
				return errors.New("dial tcp 127.0.0.1:9092: connect: connection refused")
			}
			return nil
		},
	}
	opts := instances.Options{Interval: 100 * time.Millisecond}
	relay := instances.NewReporter(pool, "relay", "relay-a", checks, opts)
	require.NoError(t, relay.Start(ctx))
	other := instances.NewReporter(pool, "relay", "relay-b", map[string]admin.Check{}, opts)
	require.NoError(t, other.Start(ctx))
	defer other.Stop()

	var rows []instances.Instance
	require.Eventually(t, func() bool {
		var err error
		rows, err = instances.Read(ctx, pool, 100)
		require.NoError(t, err)
		return len(rows) == 2
	}, 5*time.Second, 20*time.Millisecond)
	a := find(t, rows, "relay", "relay-a")
	require.True(t, a.Ready)
	require.False(t, a.Stopped)
	require.Len(t, a.Checks, 2)
	require.Equal(t, "kafka", a.Checks[0].Name)
	require.True(t, a.Checks[0].OK && a.Checks[1].OK, "%+v", a.Checks)
	require.WithinDuration(t, time.Now(), a.Seen, 5*time.Second)
	firstSeen := a.Seen

	kafkaDown.Store(true)
	require.Eventually(t, func() bool {
		rows, err := instances.Read(ctx, pool, 100)
		require.NoError(t, err)
		a = find(t, rows, "relay", "relay-a")
		return !a.Ready
	}, 5*time.Second, 20*time.Millisecond)
	require.True(t, a.Seen.After(firstSeen), "the row was not written again")
	require.False(t, a.Checks[0].OK)
	require.Contains(t, a.Checks[0].Error, "connection refused")
	require.True(t, a.Checks[1].OK, "postgres answered")

	relay.Stop()
	rows, err := instances.Read(ctx, pool, 100)
	require.NoError(t, err)
	a = find(t, rows, "relay", "relay-a")
	require.True(t, a.Stopped)
	require.False(t, a.Ready)
	require.False(t, find(t, rows, "relay", "relay-b").Stopped)
}

// A row not written for a day is deleted by the next reporter to start; a
// younger one stays.
func TestReporterForgetsRowsOfADayAgo(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO service_instances (service, instance, started_at, seen_at, ready, checks) VALUES
		('worker', 'gone', now() - interval '3 days', now() - interval '25 hours', true, '[]'),
		('worker', 'crashed', now() - interval '1 hour', now() - interval '5 minutes', true, '[]')`)
	require.NoError(t, err)
	r := instances.NewReporter(pool, "api", "api-1", nil, instances.Options{Interval: time.Hour})
	require.NoError(t, r.Start(ctx))
	defer r.Stop()
	require.Eventually(t, func() bool {
		rows, err := instances.Read(ctx, pool, 100)
		require.NoError(t, err)
		var names []string
		for _, x := range rows {
			names = append(names, x.Name)
		}
		return strings.Join(names, ",") == "api-1,crashed"
	}, 5*time.Second, 20*time.Millisecond)
}
