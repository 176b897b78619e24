// Package ledgerbench measures the worker's ledger writes on their own, for
// the question the platform benchmark raised: how many attempt records per
// second can Cassandra take with the options pkg/store/ledger offers (logged or
// unlogged batch, with or without the fence-check read) and the recorder's
// concurrency. Run it against the local Cassandra:
//
//	source <(deploy/local/infra.sh env)
//	cd bench && go test -tags integration -run '^$' -bench . -benchtime 20000x ./internal/ledgerbench
//
// Each operation is one execution: a RUNNING record, then its SUCCEEDED
// record, as the worker writes them. Besides ns/op it reports records/s and
// Cassandra's CPU per 1,000 records (from /proc, when the local
// infrastructure runs in this checkout).
package ledgerbench
