// Package harness runs a Sundial deployment as processes and measures what
// its targets receive. It is shared by the end-to-end tests (tests/e2e) and
// the benchmark command (bench/), so both exercise the platform the same
// way:
//
//	Infra       where the five components listen (SUNDIAL_TEST_* or the local defaults)
//	Namespace   one deployment's isolated slice of them: a Postgres schema, a Kafka
//	            topic prefix and consumer group, a Redis key prefix, a Cassandra
//	            keyspace and a ZooKeeper election path; Drop removes all of it
//	Build       the four service binaries, built once
//	Platform    service processes started with the namespace's settings, waited
//	            for on /readyz, stopped gracefully or killed with SIGKILL; with
//	            Config.TLS the api serves TLS (or mutual TLS) with certificates
//	            `sundial-api dev-tls` signs with the development CA
//	            (Infra.CAFile, infra.sh's), and Conn and HTTPClient verify them
//	Sink        an HTTP target (and Kafka topic reader) recording every delivery:
//	            execution id, slot, fire instant, arrival, fence, signature check
//	CreateJobs  concurrent CreateJob calls through the gRPC api
//	CopyJobs    bulk rows straight into jobs, encoded as the api stores them
//	Slots       the slots a registered job fires, computed with the same engine
//
// Nothing here imports the testing package: failures are returned as errors
// and progress goes to an injected *slog.Logger, so a test wraps the calls in
// t.Fatal and a command prints them.
package harness
