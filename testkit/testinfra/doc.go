// Package testinfra connects tests to the real components that
// deploy/local/infra.sh runs on loopback (PostgreSQL, Redis, ZooKeeper, Kafka,
// Cassandra) and gives every test a namespace of its own in each, removed when
// the test ends:
//
//	PostgreSQL  a fresh schema, selected by search_path   Postgres, PostgresDSN, PostgresPool
//	Redis       a unique key prefix                       Redis
//	ZooKeeper   a unique root znode                       ZooKeeper, ZooKeeperConnect
//	Kafka       uniquely named topics and groups          KafkaTopic, KafkaGroup, KafkaClient
//	Cassandra   a fresh keyspace                          Cassandra, CassandraKeyspace
//
// So tests of different packages can run at the same time against one set of
// servers, and a failed test leaves nothing behind that a later run trips over.
//
// Addresses come from the environment that `deploy/local/infra.sh env` prints
// (the Makefile sources it before the integration tier), falling back to the
// infrastructure's default ports:
//
//	SUNDIAL_TEST_POSTGRES_DSN     postgres://sundial:sundial@127.0.0.1:5432/sundial?sslmode=disable
//	SUNDIAL_TEST_REDIS_ADDR       127.0.0.1:6379
//	SUNDIAL_TEST_ZK_ADDRS         127.0.0.1:2181          (comma-separated)
//	SUNDIAL_TEST_KAFKA_BROKERS    127.0.0.1:9092          (comma-separated)
//	SUNDIAL_TEST_CASSANDRA_HOSTS  127.0.0.1:9042          (comma-separated host:port)
//
// Beside each open listener, infra.sh runs the component's secure mode (TLS
// with a local CA, and credentials); SecureCAFile, SecureCredentials,
// SecurePostgresDSN, SecureRedisAddr, SecureZooKeeperAddrs,
// SecureKafkaBrokers and SecureCassandraHosts read them from the
// SUNDIAL_TEST_SECURE_* variables `infra.sh env` prints (secure.go;
// docs/operations.md, "Secure listeners"). Docker Compose has none of them.
//
// A component that does not answer fails the test with a message that says to
// run `make infra-up`; tests never skip for a missing component, because a
// skipped integration test is a test that silently stopped running.
//
// The package has no build tag: it connects only when a helper is called, so
// any package's integration tests (tag integration) can import it. Its own
// smoke tests, which prove a real round trip through each component, are in
// smoke_integration_test.go.
package testinfra
