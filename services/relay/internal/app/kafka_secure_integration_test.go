//go:build integration

package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/kafkaconn"
	"github.com/sundialhq/sundial/services/relay/internal/relay"
	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// The relay's startup, against the broker's SASL_SSL listener as
// deploy/local/infra.sh configures it (SCRAM-SHA-512 over TLS): with the
// right settings its first service starts; with a wrong password, or a CA
// that did not sign the broker's certificate, it fails within seconds, the
// error naming Kafka — where every publish would otherwise fail.
func TestRelayStartsOnlyWithTheRightKafkaSettings(t *testing.T) {
	cred := testinfra.SecureCredentials()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(password, caFile string) (time.Duration, error) {
		cfg := relay.Defaults()
		cfg.KafkaBrokers = strings.Join(testinfra.SecureKafkaBrokers(t), ",")
		cfg.KafkaSecurity = kafkaconn.Security{
			SASLMechanism: kafkaconn.SASLScramSHA512, SASLUsername: cred.Username,
			SASLPassword: connsec.Password{Value: connsec.NewSecret(password)},
			TLS:          connsec.TLS{Enabled: true, CAFile: caFile},
		}
		a, err := New(ctx, cfg, deps())
		require.NoError(t, err, "New connects to nothing")
		defer a.Services[0].Stop()
		t0 := time.Now()
		err = a.Services[0].Start(ctx) // the connections' owner checks the brokers
		return time.Since(t0), err
	}
	_, err := start(cred.Password, testinfra.SecureCAFile(t))
	require.NoError(t, err)
	for name, c := range map[string]struct{ password, ca, want string }{
		"wrong password": {"not-the-password", testinfra.SecureCAFile(t), "SASL_AUTHENTICATION_FAILED"},
		"untrusted CA":   {cred.Password, tlstest.NewCA(t, "other").CertFile, "certificate signed by unknown authority"},
	} {
		took, err := start(c.password, c.ca)
		require.ErrorIs(t, err, connsec.ErrRefused, name)
		require.ErrorContains(t, err, "kafka at ", name)
		require.ErrorContains(t, err, c.want, name)
		require.Less(t, took, 10*time.Second, name)
		t.Logf("%s: %v (after %v)", name, err, took.Round(time.Millisecond))
	}
}
