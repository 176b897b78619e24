package relay

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/kafkaconn"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The relay publishes to brokers that require SASL when its flags say so:
// the producer (topic creation included) authenticates with the password
// file's content.
func TestPublishesThroughSASL(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "kafka-password")
	require.NoError(t, os.WriteFile(pw, []byte("relay-password\n"), 0o600))
	h := newHarness(t, clock.Real{}, func(c *Config) {
		c.KafkaSecurity = kafkaconn.Security{SASLMechanism: kafkaconn.SASLScramSHA512, SASLUsername: "relay", SASLPassword: connsec.Password{File: pw}}
	}, kfake.EnableSASL(), kfake.Superuser(kafkaconn.SASLScramSHA512, "relay", "relay-password"))
	h.start()
	h.stage(sundialv1.Priority_PRIORITY_HIGH, time.Now())
	h.relay.Wake()
	require.Eventually(t, func() bool { return h.ob.len() == 0 && h.ob.deletedCount() == 1 }, waitFor, 10*time.Millisecond)
}

func TestKafkaSecurityFlagsAreValidated(t *testing.T) {
	c := Defaults()
	c.KafkaSecurity.SASLMechanism = "GSSAPI"
	var p config.Problems
	c.Validate(&p)
	require.ErrorContains(t, p.Err(), "kafka-sasl-mechanism:")
}
