// Package e2e holds Sundial's end-to-end tests (build tag e2e): the four
// services run as separate processes against the real Postgres, Redis,
// ZooKeeper, Kafka and Cassandra, and a local sink checks what targets
// receive. Run them with `make test-e2e` after `make infra-up`.
//
// Every test starts a deployment of its own (harness namespace: schema,
// topics, consumer group, Redis prefix, keyspace, election path) and calls
// t.Parallel: make test-e2e runs two at a time (-parallel 2), since most
// of a test's time is waiting on real time. A new test does the same, or
// says why it cannot share the machine.
//
// The api serves TLS with certificates `sundial-api dev-tls` signs with
// the development CA (infra.sh's .infra/tls/ca.crt), and the tests' gRPC
// and HTTP clients verify them, as a deployment does; SUNDIAL_E2E_TLS=plaintext runs the suite without TLS,
// SUNDIAL_E2E_TLS=mtls with client certificates required too.
package e2e
