// Package e2e holds Sundial's end-to-end tests (build tag e2e): the four
// services run as separate processes against the real Postgres, Redis,
// ZooKeeper, Kafka and Cassandra, and a local sink checks what targets
// receive. Run them with `make test-e2e` after `make infra-up`.
package e2e
