package retention

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigValidateNamesFlags(t *testing.T) {
	require.NoError(t, Config{Retention: 7 * 24 * time.Hour, Interval: time.Minute, BatchSize: 100}.Validate())
	err := Config{}.Validate()
	for _, f := range []string{"retention", "retention-interval", "retention-batch-size"} {
		require.ErrorContains(t, err, f+":")
	}
}
