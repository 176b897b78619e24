package kafkaconn_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/kafkaconn"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every mechanism the client offers, checked against kfake, which speaks
// both protocols for real: a TLS listener and the SASL handshake and
// authenticate requests, SCRAM included. (The local Kafka's SASL_SSL
// listener, deploy/local/infra.sh's, speaks SCRAM-SHA-512 only: see
// kafkaconn_secure_integration_test.go.)
func TestKafkaSASLOverTLSWithKfake(t *testing.T) {
	ca := tlstest.NewCA(t, "kafka")
	server := ca.Server("broker")
	const topic = "sundial.fire.high"
	for _, mech := range []string{kafkaconn.SASLPlain, kafkaconn.SASLScramSHA256, kafkaconn.SASLScramSHA512} {
		t.Run(mech, func(t *testing.T) {
			cluster, err := kfake.NewCluster(
				kfake.NumBrokers(1),
				kfake.SeedTopics(1, topic),
				kfake.TLS(&tls.Config{Certificates: []tls.Certificate{server.Pair}}),
				kfake.EnableSASL(),
				kfake.Superuser(mech, "sundial", "right-password"),
			)
			require.NoError(t, err)
			defer cluster.Close()

			client := func(k kafkaconn.Security) *kgo.Client {
				opts, err := k.Opts()
				require.NoError(t, err)
				cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(cluster.ListenAddrs()...))...)
				require.NoError(t, err)
				t.Cleanup(cl.Close)
				return cl
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			secure := func(password string) kafkaconn.Security {
				return kafkaconn.Security{
					SASLMechanism: mech, SASLUsername: "sundial",
					SASLPassword: connsec.Password{Value: connsec.NewSecret(password)},
					TLS:          connsec.TLS{Enabled: true, CAFile: ca.CertFile},
				}
			}

			require.NoError(t, client(secure("right-password")).ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("firing")}).FirstErr())

			// A produce would retry until its context ends; Ping reports
			// the connection's own failure. A real broker answers
			// SASL_AUTHENTICATION_FAILED; kfake drops the connection.
			err = client(secure("wrong-password")).Ping(ctx)
			require.Error(t, err)
			if !errors.Is(err, kerr.SaslAuthenticationFailed) {
				require.ErrorIs(t, err, io.EOF)
			}

			plaintext := secure("right-password")
			plaintext.TLS = connsec.TLS{}
			require.Error(t, client(plaintext).Ping(ctx), "the listener speaks only TLS")
		})
	}
}
