//go:build integration

package kafkaconn_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/kafkaconn"
	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// The SASL_SSL listener deploy/local/infra.sh configures on the shared
// broker (SCRAM-SHA-512 over TLS, its user created when the log directory
// is formatted): a record produced and consumed through it; a wrong
// password, a CA that did not sign the broker's certificate and a
// plaintext client each refused promptly by Check, with an error naming
// Kafka.
func TestSecureKafkaListener(t *testing.T) {
	brokers := testinfra.SecureKafkaBrokers(t)
	cred := testinfra.SecureCredentials()
	secure := kafkaconn.Security{
		SASLMechanism: kafkaconn.SASLScramSHA512,
		SASLUsername:  cred.Username,
		SASLPassword:  connsec.Password{Value: connsec.NewSecret(cred.Password)},
		TLS:           connsec.TLS{Enabled: true, CAFile: testinfra.SecureCAFile(t)},
	}
	topic := testinfra.KafkaTopic(t, 1) // made through the plaintext listener
	client := func(t *testing.T, k kafkaconn.Security, extra ...kgo.Opt) *kgo.Client {
		t.Helper()
		opts, err := k.Opts()
		require.NoError(t, err)
		cl, err := kgo.NewClient(append(append(opts, kgo.SeedBrokers(brokers...)), extra...)...)
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		return cl
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	producer := client(t, secure)
	require.NoError(t, kafkaconn.Check(ctx, producer, brokers))
	require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("over SASL_SSL")}).FirstErr())
	consumer := client(t, secure, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for len(got) == 0 && ctx.Err() == nil {
		fs := consumer.PollFetches(ctx)
		require.NoError(t, fs.Err0())
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	require.Equal(t, []string{"over SASL_SSL"}, got)

	refused := func(t *testing.T, k kafkaconn.Security, want string) error {
		t.Helper()
		start := time.Now()
		err := kafkaconn.Check(ctx, client(t, k), brokers)
		require.Error(t, err)
		require.Less(t, time.Since(start), 10*time.Second, "refused only after %v: %v", time.Since(start), err)
		require.ErrorContains(t, err, "kafka at ")
		require.ErrorContains(t, err, want)
		t.Logf("%v (after %v)", err, time.Since(start).Round(time.Millisecond))
		return err
	}
	t.Run("wrong password", func(t *testing.T) {
		wrong := secure
		wrong.SASLPassword = connsec.Password{Value: connsec.NewSecret("not-the-password")}
		require.ErrorIs(t, refused(t, wrong, "SASL_AUTHENTICATION_FAILED"), connsec.ErrRefused)
	})
	t.Run("untrusted CA", func(t *testing.T) {
		other := secure
		other.TLS.CAFile = tlstest.NewCA(t, "other").CertFile
		require.ErrorIs(t, refused(t, other, "certificate signed by unknown authority"), connsec.ErrRefused)
	})
	t.Run("plaintext on the SASL_SSL listener", func(t *testing.T) {
		plain := secure
		plain.TLS = connsec.TLS{}
		require.ErrorIs(t, refused(t, plain, ""), connsec.ErrRefused)
	})
}
