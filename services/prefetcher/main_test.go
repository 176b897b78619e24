package main

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// gocql runs schema and topology event handlers in goroutines of
		// their own that Session.Close does not wait for.
		goleak.IgnoreAnyFunction("github.com/gocql/gocql.(*Session).handleSchemaEvent"),
		goleak.IgnoreAnyFunction("github.com/gocql/gocql.(*Session).handleNodeEvent"),
	)
}

func parse(t *testing.T, args ...string) error {
	t.Helper()
	var s settings
	fs := flag.NewFlagSet("prefetcher", flag.ContinueOnError)
	s.register(fs)
	require.NoError(t, config.Load(fs, args, func(string) (string, bool) { return "", false }))
	s.NodeID = "n1"
	var p config.Problems
	s.validate(&p)
	return p.Err()
}

func TestDefaultsAreValid(t *testing.T) {
	require.NoError(t, parse(t))
}

func TestBadSettingsAreNamed(t *testing.T) {
	err := parse(t, "--catch-up-rate", "-1", "--chunk", "-1s", "--retention", "0s", "--ledger-drain-batch-size", "0",
		"--skip-records-per-job", "-5", "--cassandra-hosts", " , ", "--cassandra-keyspace", "bad-name")
	for _, f := range []string{"catch-up-rate", "chunk", "retention", "ledger-drain-batch-size", "skip-records-per-job", "cassandra-hosts", "cassandra-keyspace"} {
		require.ErrorContains(t, err, f+":")
	}
}

func TestComponentSecuritySettingsAreNamed(t *testing.T) {
	err := parse(t, "--zk-username", "sundial", "--zk-tls-cert-file", "/tls.crt", "--cassandra-username", "sundial")
	for _, f := range []string{"zk-password", "zk-tls-cert-file", "cassandra-password"} {
		require.ErrorContains(t, err, f+":")
	}
}
