package ledger

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Table names inside the ledger's keyspace.
const (
	// TableAttempts holds every record, many jobs per partition: partition
	// (bucket of job_id, day of the slot), clustered by job then newest
	// slot first, so a herd of records due together is a few
	// single-partition batches and one job's day is one slice.
	TableAttempts = "attempts_by_bucket"
	// TableIndex maps an execution id to its job and slot (so to its
	// TableAttempts partition); partition (bucket of execution_id, day of
	// the write), so it is written grouped too.
	TableIndex = "execution_index"
	// TableByTenant holds a copy of every record by tenant and hour of
	// its slot, newest slot first: the cross-job listing (a tenant's
	// executions in a time range, filtered by status) reads slices of it
	// instead of every job's partitions.
	TableByTenant = "executions_by_tenant"

	// TableByJob and TableByID are the first layout (one record per
	// partition, a logged batch per record). Migrate still creates them
	// and the Reader still reads them, for rows written before the
	// upgrade, until their TTL; nothing writes them unless a Writer is
	// built WithLegacyLayout (kept for measurement).
	TableByJob = "executions_by_job"
	TableByID  = "executions_by_id"
)

// TTL is how long a ledger row lives: the table default, so every write
// expires without naming it.
const TTL = 90 * 24 * time.Hour

// MaxTTL is the longest a row may be kept (WithTenantTTL): the Reader looks
// back TTL by default, so rows older than that are not listed; a tenant may
// keep its history shorter than the default, not longer.
const MaxTTL = TTL

// MinTTL is the shortest per-tenant TTL the configuration accepts: history
// that vanishes within the hour would hide the firings an operator is
// looking into.
const MinTTL = time.Hour

// DefaultReplication is a single-copy keyspace, right for a laptop or a test
// node. Production passes NetworkTopologyStrategy with three copies per DC.
const DefaultReplication = "{'class': 'SimpleStrategy', 'replication_factor': 1}"

// tailColumns follow the partition key in every record table, in this order.
const tailColumns = "scheduled_at, execution_id, attempt, fence, tenant, status, " +
	"fire_at, started_at, finished_at, lateness_ns, duration_ns, worker, http_status, " +
	"error, response_excerpt, catch_up, job_version, reason"

// columns are the legacy tables' columns in write order.
const columns = "job_id, month, " + tailColumns

// attemptColumns are TableAttempts' columns in write order.
const attemptColumns = "bucket, day, job_id, " + tailColumns

// partsDef is the packed-record column of the grouped tables: one cell per
// record written to the row, keyed by its status rank (statusRank), each
// the attempt's fields outside the key as a protobuf ExecutionAttempt
// (packRecord). One cell instead of one per field is what the write costs
// Cassandra; a map instead of a single blob keeps the column layout's
// merge: a later record of the attempt adds its own entry and never
// buries fields an earlier one wrote (Reader merges them in rank order).
const partsDef = `
    parts             map<int, blob>, -- packed records by status rank`

// tenantColumns are TableByTenant's columns in write order.
// (tenant, a partition key column, is among the tail's.)
const tenantColumns = "hour, job_id, " + tailColumns

// readColumns are what every read of the legacy tables selects.
const readColumns = "job_id, " + tailColumns

// groupedReadColumns are what every read of the grouped tables
// (TableAttempts, TableByTenant) selects: the columns, for rows written
// before records were packed, and the packed records.
const groupedReadColumns = readColumns + ", parts"

const columnDefs = `
    job_id            text,
    month             int,        -- bucket: yyyymm of scheduled_at in UTC` + tailDefs

const attemptDefs = `
    bucket            int,        -- FNV-1a of job_id mod Buckets
    day               int,        -- yyyymmdd of scheduled_at in UTC
    job_id            text,` + tailDefs

const tailDefs = `
    scheduled_at      timestamp,  -- the slot
    execution_id      text,
    attempt           int,
    fence             bigint,     -- lease fence token; 0 = written without a lease
    tenant            text,
    status            text,       -- sundial.v1.ExecutionStatus name
    fire_at           timestamp,
    started_at        timestamp,
    finished_at       timestamp,
    lateness_ns       bigint,     -- started - fire, exact (instants are ms)
    duration_ns       bigint,
    worker            text,
    http_status       int,
    error             text,
    response_excerpt  text,
    catch_up          boolean,
    job_version       bigint,
    reason            text,`

// tableOptions: every row expires after TTL, and time-window compaction
// keeps rows written in the same 3-day window together, so a window whose
// rows have all expired is dropped as a whole file instead of being
// rewritten (30 windows over the 90 days, inside TWCS's advice of 20-30).
// gc_grace is one day: rows are never deleted, only expire, and expiry is
// the same on every replica, so a long grace would only delay purging.
const tableOptions = `
  AND default_time_to_live = %d
  AND gc_grace_seconds = 86400
  AND compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'DAYS', 'compaction_window_size': 3}`

var keyspaceName = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]{0,47}$`)

// ValidKeyspace reports whether ks is a keyspace name the ledger accepts: a
// letter then up to 47 letters, digits or underscores, unquoted.
func ValidKeyspace(ks string) error {
	if !keyspaceName.MatchString(ks) {
		return fmt.Errorf("ledger: keyspace %q: want a letter then up to 47 letters, digits or underscores", ks)
	}
	return nil
}

// schema is the ledger's DDL in order. Every statement is idempotent
// (IF NOT EXISTS), so Migrate can run at every start of every replica.
func schema(keyspace, replication string) []string {
	ttl := int(TTL / time.Second)
	return []string{
		fmt.Sprintf(`CREATE KEYSPACE IF NOT EXISTS %s WITH replication = %s AND durable_writes = true`, keyspace, replication),
		// Newest slot first within a (job, month) partition; an attempt's
		// rows under several fences sit together, highest fence first. Every
		// clustering column descends so "rows after this key" is one tuple
		// comparison (the page cursor).
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (%s
    PRIMARY KEY ((job_id, month), scheduled_at, execution_id, attempt, fence)
) WITH CLUSTERING ORDER BY (scheduled_at DESC, execution_id DESC, attempt DESC, fence DESC)`+tableOptions,
			keyspace, TableByJob, columnDefs, ttl),
		// One partition per execution: its attempts in order, each attempt's
		// highest fence first (the fence check reads exactly that row).
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (%s
    PRIMARY KEY ((execution_id), attempt, fence)
) WITH CLUSTERING ORDER BY (attempt ASC, fence DESC)`+tableOptions,
			keyspace, TableByID, columnDefs, ttl),
		// The grouped layout. Within a partition: one job's rows together,
		// newest slot first, an attempt's rows highest fence first, so a
		// job's page is one slice and the page cursor one tuple comparison
		// after the job_id equality.
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (%s
    PRIMARY KEY ((bucket, day), job_id, scheduled_at, execution_id, attempt, fence)
) WITH CLUSTERING ORDER BY (job_id ASC, scheduled_at DESC, execution_id DESC, attempt DESC, fence DESC)`+tableOptions,
			keyspace, TableAttempts, attemptDefs+partsDef, ttl),
		// A tenant's records by the hour of their slot (yyyymmddhh, UTC):
		// newest slot first, an attempt's rows together, highest fence
		// first, every clustering column descending so the page cursor is
		// one tuple comparison. An hour, not a day: a tenant firing 1,000
		// times a second writes 3.6 M rows an hour.
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
    hour              int,        -- yyyymmddhh of scheduled_at in UTC`+strings.Replace(tailDefs, "scheduled_at      timestamp,  -- the slot", "scheduled_at      timestamp,  -- the slot\n    job_id            text,", 1)+partsDef+`
    PRIMARY KEY ((tenant, hour), scheduled_at, job_id, execution_id, attempt, fence)
) WITH CLUSTERING ORDER BY (scheduled_at DESC, job_id DESC, execution_id DESC, attempt DESC, fence DESC)`+tableOptions,
			keyspace, TableByTenant, ttl),
		// execution id -> (job, slot). Partitioned by the day of the write,
		// not of the slot: every entry is younger than the TTL, so a lookup
		// reads a bounded set of days even for a backfill of old slots.
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
    bucket        int,        -- FNV-1a of execution_id mod Buckets
    day           int,        -- yyyymmdd of the write in UTC
    execution_id  text,
    job_id        text,
    scheduled_at  timestamp,
    PRIMARY KEY ((bucket, day), execution_id)
) WITH compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'DAYS', 'compaction_window_size': 3}
  AND default_time_to_live = %d AND gc_grace_seconds = 86400`,
			keyspace, TableIndex, ttl),
		// Tables created before records were packed gain the column; rows
		// written before keep their columns, which the Reader still reads.
		fmt.Sprintf(`ALTER TABLE %s.%s ADD IF NOT EXISTS parts map<int, blob>`, keyspace, TableAttempts),
		fmt.Sprintf(`ALTER TABLE %s.%s ADD IF NOT EXISTS parts map<int, blob>`, keyspace, TableByTenant),
	}
}

// Migrate creates the ledger's keyspace (with the given replication map, a
// CQL literal such as DefaultReplication; empty means DefaultReplication) and
// tables if they do not exist, and the columns later versions added to them
// (ADD IF NOT EXISTS), waiting for schema agreement after each statement. It
// never drops or changes anything, so it is safe to run at every start;
// changing replication later is an operator's ALTER KEYSPACE.
func Migrate(ctx context.Context, s Session, keyspace, replication string) error {
	if err := ValidKeyspace(keyspace); err != nil {
		return err
	}
	replication = strings.TrimSpace(replication)
	if replication == "" {
		replication = DefaultReplication
	}
	if !strings.HasPrefix(replication, "{") || !strings.HasSuffix(replication, "}") {
		return fmt.Errorf("ledger: replication %q: want a CQL map literal such as %s", replication, DefaultReplication)
	}
	for _, ddl := range schema(keyspace, replication) {
		if err := s.Exec(ctx, Statement{CQL: ddl, Idempotent: true}); err != nil {
			return fmt.Errorf("ledger: migrate %s: %w", keyspace, err)
		}
		if err := s.AwaitSchemaAgreement(ctx); err != nil {
			return fmt.Errorf("ledger: migrate %s: schema agreement: %w", keyspace, err)
		}
	}
	return nil
}
