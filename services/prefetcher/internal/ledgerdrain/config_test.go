package ledgerdrain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigValidateNamesFlags(t *testing.T) {
	require.NoError(t, Config{Interval: time.Second, BatchSize: 500, Concurrency: 16, BatchTimeout: time.Minute}.Validate())
	err := Config{}.Validate()
	for _, f := range []string{"ledger-drain-interval", "ledger-drain-batch-size", "ledger-drain-concurrency", "ledger-drain-timeout"} {
		require.ErrorContains(t, err, f+":")
	}
}
