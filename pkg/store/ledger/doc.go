// Package ledger is Sundial's execution history in Cassandra: one row per
// attempt of every execution, kept 90 days (or its tenant's TTL),
// queryable by job (newest slot first, across day buckets shared by many
// jobs), by execution id, and by tenant across jobs.
//
// Workers write with Writer.Record at each transition of an attempt, or
// many records at once with Writer.RecordMany (one single-partition batch
// per partition, the worker's recorder groups by PartitionKey); the api
// reads with Reader.ListByJob, Reader.GetExecution and Reader.ListByTenant
// (a tenant's attempts across jobs, from a by-tenant copy of every record;
// WithTenantTTL writes each row with its tenant's TTL). Migrate creates the
// keyspace and tables idempotently. DESIGN.md explains the data model, why
// the fence token is part of each row's key, the write timestamps, the
// logged batch and the measurements behind those choices.
//
// # Fencing
//
// Each attempt is run under a lease whose fence token rises every time the
// lease changes hands. A worker that lost its lease may still finish and
// record its result after the new holder did. Because the fence is a
// clustering column, that late record lands in its own row and can never
// overwrite the newer holder's; readers report it as FENCED. Record detects
// the common case with one single-row read and returns ErrFenced.
//
// # Seams
//
// Writer and Reader talk to Cassandra through Session, a small interface
// with one gocql implementation (Wrap, Connect) and two decorators:
// Retrying (bounded retries of idempotent writes on transient errors) and
// Instrumented (request latency by operation and outcome). Compose them as
//
//	s, err := ledger.Connect(ledger.ConnectConfig{Hosts: hosts})
//	s = ledger.Instrumented(ledger.Retrying(s, ledger.DefaultRetryPolicy), registry)
//	err = ledger.Migrate(ctx, s, "sundial", ledger.DefaultReplication)
//	w := ledger.NewWriter(s, "sundial")
//	r := ledger.NewReader(s, "sundial")
package ledger
