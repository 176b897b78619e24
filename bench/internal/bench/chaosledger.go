package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// ledgerGaps reads, through the api's history as a user would, the
// final records of the executions in want that reached a target, and
// returns those without one. It looks again
// until deadline, since records linger in the workers' grouped writers
// for a moment and those spilled to Postgres while Cassandra was down
// reach it when the prefetcher drains them.
func (d *deployment) ledgerGaps(ctx context.Context, want harness.Expected, got []harness.Delivery, deadline time.Time) (delivered int, gaps []uuid.UUID, err error) {
	pending := map[uuid.UUID]uuid.UUID{} // execution → job
	for _, dl := range got {
		if s, ok := want[dl.ExecutionID]; ok && dl.Err == nil {
			pending[dl.ExecutionID] = s.JobID
		}
	}
	delivered = len(pending)
	var oldest time.Time
	for _, s := range want {
		if oldest.IsZero() || s.Scheduled.Before(oldest) {
			oldest = s.Scheduled
		}
	}
	for {
		jobs := map[uuid.UUID]bool{}
		for _, job := range pending {
			jobs[job] = true
		}
		for job := range jobs {
			if err := d.readFinals(ctx, job, oldest, pending); err != nil {
				return delivered, nil, err
			}
		}
		if len(pending) == 0 || d.r.clock.Now().After(deadline) {
			break
		}
		if err := Sleep(ctx, d.r.clock, 5*time.Second); err != nil {
			return delivered, nil, err
		}
	}
	for exec := range pending {
		gaps = append(gaps, exec)
	}
	return delivered, gaps, nil
}

// readFinals walks job's history, newest first, back to oldest, and
// takes every execution with a final record out of pending.
func (d *deployment) readFinals(ctx context.Context, job uuid.UUID, oldest time.Time, pending map[uuid.UUID]uuid.UUID) error {
	token := ""
	for {
		resp, err := d.client.ListExecutions(ctx, &sundialv1.ListExecutionsRequest{JobId: job.String(), PageSize: 1000, PageToken: token})
		if err != nil {
			return fmt.Errorf("chaos: history of job %s: %w", job, err)
		}
		done := false
		for _, a := range resp.GetAttempts() {
			if a.GetScheduledTime().AsTime().Before(oldest) {
				done = true
				break
			}
			if finalStatus(a.GetStatus()) {
				if id, err := uuid.Parse(a.GetExecutionId()); err == nil {
					delete(pending, id)
				}
			}
		}
		token = resp.GetNextPageToken()
		if done || token == "" {
			return nil
		}
	}
}

// finalStatus reports whether an attempt in status s has ended.
func finalStatus(s sundialv1.ExecutionStatus) bool {
	switch s {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED, sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED:
		return true
	}
	return false
}

// ledgerRefuses makes the ledger answer every read and write with an
// error while it stays up: the keyspace's replication factor is raised to
// twice the nodes there are plus one, so LOCAL_QUORUM needs one node more
// than the ring has and Cassandra answers Unavailable at once — not a
// timeout, not a closed connection. That is what a node that lost the
// keyspace, or a ring below its quorum, answers. After LongOutage the
// replication is set back as it was (no data moved: every node that held a
// record still holds it).
func (c *chaos) ledgerRefuses(ctx context.Context) (string, error) {
	s, err := c.r.opts.Infra.CassandraCluster().CreateSession()
	if err != nil {
		return "", fmt.Errorf("chaos: cassandra: %w", err)
	}
	defer s.Close()
	ks := c.d.ns.Keyspace
	var was map[string]string
	if err := s.Query(`SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?`, ks).WithContext(ctx).Scan(&was); err != nil {
		return "", fmt.Errorf("chaos: the ledger keyspace %s: %w", ks, err)
	}
	var peers int
	if err := s.Query(`SELECT count(*) FROM system.peers`).WithContext(ctx).Scan(&peers); err != nil {
		return "", fmt.Errorf("chaos: cassandra peers: %w", err)
	}
	nodes := peers + 1
	refusing := fmt.Sprintf("{'class': 'SimpleStrategy', 'replication_factor': %d}", 2*nodes+1)
	if err := alterReplication(ctx, s, ks, refusing); err != nil {
		return "", err
	}
	from := c.r.clock.Now()
	slept := Sleep(ctx, c.r.clock, c.cfg.LongOutage)
	// Set back even when the run is cancelled: a keyspace left refusing
	// would outlive it.
	if err := alterReplication(context.WithoutCancel(ctx), s, ks, replicationLiteral(was)); err != nil {
		return "", err
	}
	if slept != nil {
		return "", slept
	}
	return fmt.Sprintf("the ledger refused every call for %s (%d node(s), replication factor %d, LOCAL_QUORUM unavailable)",
		c.r.clock.Now().Sub(from).Round(100*time.Millisecond), nodes, 2*nodes+1), nil
}

func alterReplication(ctx context.Context, s *gocql.Session, keyspace, replication string) error {
	if err := s.Query(`ALTER KEYSPACE ` + keyspace + ` WITH replication = ` + replication).WithContext(ctx).Exec(); err != nil {
		return fmt.Errorf("chaos: replication of %s to %s: %w", keyspace, replication, err)
	}
	return nil
}

// replicationLiteral writes a keyspace's replication map, as
// system_schema.keyspaces holds it, back as CQL.
func replicationLiteral(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("'%s': '%s'", k, m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
