package app

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/config"
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
	var s Config
	fs := flag.NewFlagSet("prefetcher", flag.ContinueOnError)
	s.Register(fs)
	require.NoError(t, config.Load(fs, args, func(string) (string, bool) { return "", false }))
	s.NodeID = "n1"
	var p config.Problems
	s.Validate(&p)
	return p.Err()
}

func TestDefaultsAreValid(t *testing.T) {
	require.NoError(t, parse(t))
}

// --chunk=auto (the default) is a quarter of the window, at most 30 s; an
// explicit duration, 0 included, is taken as is.
func TestChunkDefaultFollowsTheWindow(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 30 * time.Second},
		{[]string{"--window", "2s", "--tick", "200ms"}, 500 * time.Millisecond},
		{[]string{"--window", "10m"}, 30 * time.Second},
		{[]string{"--chunk", "2m"}, 2 * time.Minute},
		{[]string{"--chunk", "0s"}, 0},
		{[]string{"--chunk", "auto", "--window", "1m"}, 15 * time.Second},
	} {
		var s Config
		fs := flag.NewFlagSet("prefetcher", flag.ContinueOnError)
		s.Register(fs)
		require.NoError(t, config.Load(fs, c.args, func(string) (string, bool) { return "", false }))
		var p config.Problems
		s.Validate(&p)
		require.Equal(t, c.want, s.Chunk, "%v", c.args)
	}
}

// The ledger drain's pace: the floor at least 1/s, the ceiling at least
// the floor; each problem names its flag.
func TestDrainRatesAreChecked(t *testing.T) {
	require.ErrorContains(t, parse(t, "--ledger-drain-min-rate", "0"), "ledger-drain-min-rate:")
	err := parse(t, "--ledger-drain-min-rate", "200", "--ledger-drain-max-rate", "150")
	require.ErrorContains(t, err, "ledger-drain-max-rate:")
	require.NotContains(t, err.Error(), "ledger-drain-min-rate:")
	require.NoError(t, parse(t, "--ledger-drain-min-rate", "10", "--ledger-drain-max-rate", "10"))
}

func TestBadSettingsAreNamed(t *testing.T) {
	err := parse(t, "--catch-up-rate", "-1", "--chunk", "-1s", "--retention", "0s", "--ledger-drain-batch-size", "0",
		"--skip-records-per-job", "-5", "--cassandra-hosts", " , ", "--cassandra-keyspace", "bad-name", "--fill-step", "-1s")
	for _, f := range []string{"catch-up-rate", "fill-step", "chunk", "retention", "ledger-drain-batch-size", "skip-records-per-job", "cassandra-hosts", "cassandra-keyspace"} {
		require.ErrorContains(t, err, f+":")
	}
}

func TestComponentSecuritySettingsAreNamed(t *testing.T) {
	err := parse(t, "--zk-username", "sundial", "--zk-tls-cert-file", "/tls.crt", "--cassandra-username", "sundial")
	for _, f := range []string{"zk-password", "zk-tls-cert-file", "cassandra-password"} {
		require.ErrorContains(t, err, f+":")
	}
}

// --ranges splits the 256 partitions evenly (1: a single leader); 0, the
// single elected leader of earlier versions, is refused by name and points
// at --ranges 1.
func TestRangesMustDivideThePartitions(t *testing.T) {
	for _, ok := range []string{"1", "16", "256"} {
		require.NoError(t, parse(t, "--ranges", ok), ok)
	}
	for _, bad := range []string{"0", "3", "-1", "512"} {
		require.ErrorContains(t, parse(t, "--ranges", bad), "ranges:", bad)
	}
	require.ErrorContains(t, parse(t, "--ranges", "0"), "--ranges 1")
}
