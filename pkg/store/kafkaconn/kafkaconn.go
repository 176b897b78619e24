// Package kafkaconn is how a service's Kafka clients reach the brokers
// securely: TLS and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) from the
// --kafka-tls* and --kafka-sasl-* flags, as franz-go client options that
// every Kafka client of a service takes (the relay's producer, the
// worker's consumer and producers, the api's topic check). It is a package
// of its own so that only the services that speak Kafka link franz-go;
// connsec has the TLS and password pieces every component's settings
// share.
//
// A SASL password file is read again each time a connection authenticates
// (and re-authenticates, KIP-368), so a rotated password is used by the
// next connection without a restart.
package kafkaconn

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/connsec"
)

// SASL mechanisms the Kafka client can use.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// Security is how the services authenticate to the brokers (SASL) and
// whether they use TLS.
type Security struct {
	// SASLMechanism is empty (no SASL), PLAIN, SCRAM-SHA-256 or
	// SCRAM-SHA-512, in any case.
	SASLMechanism string
	SASLUsername  string
	SASLPassword  connsec.Password
	TLS           connsec.TLS
}

// Register adds the --kafka-* security flags to fs.
func (k *Security) Register(fs *flag.FlagSet) {
	fs.StringVar(&k.SASLMechanism, "kafka-sasl-mechanism", k.SASLMechanism, "SASL mechanism towards the brokers: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)")
	fs.StringVar(&k.SASLUsername, "kafka-sasl-username", k.SASLUsername, "SASL user")
	k.SASLPassword.Register(fs, "kafka-sasl-password", "SASL password")
	k.TLS.Register(fs, "kafka", "the Kafka brokers")
}

// Validate records problems, each naming its flag.
func (k *Security) Validate(p *config.Problems) {
	switch mech := k.mechanism(); mech {
	case "":
		if k.SASLUsername != "" || !k.SASLPassword.IsZero() {
			p.Addf("kafka-sasl-mechanism", "required with a SASL user or password: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if k.SASLUsername == "" {
			p.Addf("kafka-sasl-username", "required with --kafka-sasl-mechanism=%s", mech)
		}
		if k.SASLPassword.IsZero() {
			p.Addf("kafka-sasl-password", "required with --kafka-sasl-mechanism=%s (or --kafka-sasl-password-file)", mech)
		}
	default:
		p.Addf("kafka-sasl-mechanism", "%q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", k.SASLMechanism)
	}
	k.SASLPassword.Validate(p, "kafka-sasl-password")
	k.TLS.Validate(p, "kafka")
}

func (k *Security) mechanism() string { return strings.ToUpper(strings.TrimSpace(k.SASLMechanism)) }

// Opts are the client options for k: none when k is the zero value. Every
// Kafka client of a service takes them (producers, consumers, admin).
func (k *Security) Opts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tc, err := k.TLS.Config()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		// franz-go clones the config per broker and fills in ServerName
		// from the broker's host when it is empty.
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if m := k.saslMechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// saslMechanism is the mechanism, asking for the password each time a
// connection authenticates (and re-authenticates, KIP-368), so a rotated
// password file is picked up; nil without SASL.
func (k *Security) saslMechanism() sasl.Mechanism {
	user, pw := k.SASLUsername, k.SASLPassword
	scramAuth := func(context.Context) (scram.Auth, error) {
		s, err := pw.Read()
		return scram.Auth{User: user, Pass: s}, err
	}
	switch k.mechanism() {
	case SASLPlain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			s, err := pw.Read()
			return plain.Auth{User: user, Pass: s}, err
		})
	case SASLScramSHA256:
		return scram.Sha256(scramAuth)
	case SASLScramSHA512:
		return scram.Sha512(scramAuth)
	}
	return nil
}

// Check is a service's startup check of a Kafka client: one request to the
// brokers, bounded by ctx, whose error names Kafka and the brokers, so the
// operator reading why a service stopped knows which component refused it
// (SASL_AUTHENTICATION_FAILED for a wrong password, "certificate signed by
// unknown authority" for a broker its CA bundle does not cover); those
// refusals are marked connsec.ErrRefused.
func Check(ctx context.Context, cl *kgo.Client, brokers []string) error {
	err := cl.Ping(ctx)
	if err == nil {
		return nil
	}
	if connsec.IsTLSRefusal(err) || errors.Is(err, kerr.SaslAuthenticationFailed) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) || errors.Is(err, kerr.IllegalSaslState) ||
		// franz-go's reading of a TLS alert where a plaintext reply was due
		strings.Contains(err.Error(), "plaintext connection speaking to a tls endpoint") {
		err = connsec.Refused(err)
	}
	return fmt.Errorf("kafka at %s: %w", strings.Join(brokers, ","), err)
}
