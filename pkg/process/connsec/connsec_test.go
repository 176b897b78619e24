package connsec_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/kafkaconn"
	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// all is every component's settings, registered on one flag set the way a
// service registers the ones it uses.
type all struct {
	Redis     lease.Security
	Kafka     kafkaconn.Security
	Cassandra ledger.Security
	ZooKeeper rangeleader.Security
}

func load(t *testing.T, args []string, env map[string]string) (*all, error) {
	t.Helper()
	var a all
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer))
	a.Redis.Register(fs)
	a.Kafka.Register(fs)
	a.Cassandra.Register(fs)
	a.ZooKeeper.Register(fs)
	if err := config.Load(fs, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	var p config.Problems
	a.Redis.Validate(&p)
	a.Kafka.Validate(&p)
	a.Cassandra.Validate(&p)
	a.ZooKeeper.Validate(&p)
	return &a, p.Err()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// The defaults are what the services did before this package: plaintext,
// no credentials, whatever the client.
func TestDefaultsChangeNothing(t *testing.T) {
	a, err := load(t, nil, nil)
	require.NoError(t, err)

	var o redis.Options
	require.NoError(t, a.Redis.Apply(&o))
	require.Equal(t, redis.Options{}, o)

	opts, err := a.Kafka.Opts()
	require.NoError(t, err)
	require.Empty(t, opts)

	var cc ledger.ConnectConfig
	require.NoError(t, a.Cassandra.Apply(&cc))
	require.Nil(t, cc.TLS)
	require.Nil(t, cc.Authenticator)

	var lc rangeleader.Config
	require.NoError(t, a.ZooKeeper.Apply(&lc))
	require.Empty(t, lc.Credentials)
	require.NotNil(t, lc.Dialer, "a plain dialer (net.DialTimeout)")
}

func TestValidateNamesTheFlag(t *testing.T) {
	ca := tlstest.NewCA(t, "v")
	cl := ca.Client("c", "sundial")
	empty := writeFile(t, "empty", "\n")
	notPEM := writeFile(t, "ca.crt", "not a certificate")
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want []string // substrings of the error, each naming a flag
	}{
		{"redis user without password", []string{"--redis-username=app"}, nil, []string{"redis-password: required with --redis-username"}},
		{"redis password twice", []string{"--redis-password-file=" + cl.CertFile}, map[string]string{"SUNDIAL_REDIS_PASSWORD": "x"}, []string{"redis-password: give --redis-password or --redis-password-file, not both"}},
		{"redis password file missing", []string{"--redis-password-file=/nonexistent/pw"}, nil, []string{"redis-password-file: open /nonexistent/pw"}},
		{"redis password file empty", []string{"--redis-password-file=" + empty}, nil, []string{"redis-password-file: " + empty + " is empty"}},
		{"tls setting without tls", []string{"--redis-tls-ca-file=" + ca.CertFile}, nil, []string{"redis-tls-ca-file: has no effect without --redis-tls"}},
		{"ca file not PEM", []string{"--kafka-tls", "--kafka-tls-ca-file=" + notPEM}, nil, []string{"kafka-tls-ca-file: " + notPEM + " holds no PEM certificate"}},
		{"cert without key", []string{"--cassandra-tls", "--cassandra-tls-cert-file=" + cl.CertFile}, nil, []string{"cassandra-tls-key-file: required with --cassandra-tls-cert-file"}},
		{"key without cert", []string{"--zk-tls", "--zk-tls-key-file=" + cl.KeyFile}, nil, []string{"zk-tls-cert-file: required with --zk-tls-key-file"}},
		{"cert and key mismatched", []string{"--redis-tls", "--redis-tls-cert-file=" + cl.CertFile, "--redis-tls-key-file=" + ca.Server("s").KeyFile}, nil, []string{"redis-tls-cert-file: "}},
		{"skip verify and a CA", []string{"--redis-tls", "--redis-tls-insecure-skip-verify", "--redis-tls-ca-file=" + ca.CertFile}, nil, []string{"redis-tls-insecure-skip-verify: skips the verification"}},
		{"kafka unknown mechanism", []string{"--kafka-sasl-mechanism=GSSAPI"}, nil, []string{`kafka-sasl-mechanism: "GSSAPI" is not one of`}},
		{"kafka user without mechanism", []string{"--kafka-sasl-username=app"}, nil, []string{"kafka-sasl-mechanism: required with a SASL user or password"}},
		{"kafka mechanism without user or password", []string{"--kafka-sasl-mechanism=scram-sha-512"}, nil, []string{"kafka-sasl-username: required", "kafka-sasl-password: required"}},
		{"cassandra password without user", nil, map[string]string{"SUNDIAL_CASSANDRA_PASSWORD": "pw"}, []string{"cassandra-username: required with a Cassandra password"}},
		{"cassandra user without password", []string{"--cassandra-username=app"}, nil, []string{"cassandra-password: required with --cassandra-username"}},
		{"zk user without password", []string{"--zk-username=app"}, nil, []string{"zk-password: required with --zk-username"}},
		{"zk user with a colon", []string{"--zk-username=a:b", "--zk-password=pw"}, nil, []string{"zk-username: must not contain ':'"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.args, tc.env)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestValidSettingsPass(t *testing.T) {
	ca := tlstest.NewCA(t, "ok")
	cl := ca.Client("c", "sundial")
	pw := writeFile(t, "pw", "s3cret\n")
	_, err := load(t, []string{
		"--redis-username=app", "--redis-password-file=" + pw, "--redis-tls", "--redis-tls-ca-file=" + ca.CertFile,
		"--kafka-sasl-mechanism=scram-sha-256", "--kafka-sasl-username=app", "--kafka-tls", "--kafka-tls-cert-file=" + cl.CertFile, "--kafka-tls-key-file=" + cl.KeyFile,
		"--cassandra-username=app", "--cassandra-tls", "--cassandra-tls-server-name=cassandra.internal",
		"--zk-username=app", "--zk-password-file=" + pw, "--zk-tls", "--zk-tls-insecure-skip-verify",
	}, map[string]string{"SUNDIAL_KAFKA_SASL_PASSWORD": "k", "SUNDIAL_CASSANDRA_PASSWORD": "c"})
	require.NoError(t, err)
}

// A password must not leak through any way a configuration gets printed.
func TestSecretsNeverPrint(t *testing.T) {
	const pw = "hunter2-do-not-print"
	a, err := load(t, []string{"--redis-username=app"}, map[string]string{"SUNDIAL_REDIS_PASSWORD": pw})
	require.NoError(t, err)
	require.Equal(t, pw, a.Redis.Password.Value.Reveal())

	var out bytes.Buffer
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X"} {
		fmt.Fprintf(&out, f+"\n", *a)
		fmt.Fprintf(&out, f+"\n", a.Redis.Password.Value)
	}
	b, err := json.Marshal(a)
	require.NoError(t, err)
	out.Write(b)
	slog.New(slog.NewJSONHandler(&out, nil)).Info("config", "redis", a.Redis, "password", a.Redis.Password.Value)
	slog.New(slog.NewTextHandler(&out, nil)).Info("config", "password", a.Redis.Password.Value)
	// The usage text, printed on -h or a bad flag.
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(&out)
	a.Redis.Register(fs)
	fs.PrintDefaults()

	require.NotContains(t, out.String(), pw)
	require.NotContains(t, out.String(), fmt.Sprintf("%x", pw))
	require.Contains(t, out.String(), "[redacted]")
}

func TestPasswordFile(t *testing.T) {
	p := connsec.Password{File: writeFile(t, "pw", "first\r\n")}
	s, err := p.Read()
	require.NoError(t, err)
	require.Equal(t, "first", s)

	require.NoError(t, os.WriteFile(p.File, []byte("second"), 0o600))
	s, err = p.Read()
	require.NoError(t, err)
	require.Equal(t, "second", s, "a rotated file is read again")
}

func TestRedisApply(t *testing.T) {
	t.Run("value", func(t *testing.T) {
		a, err := load(t, []string{"--redis-username=app"}, map[string]string{"SUNDIAL_REDIS_PASSWORD": "pw"})
		require.NoError(t, err)
		var o redis.Options
		require.NoError(t, a.Redis.Apply(&o))
		require.Equal(t, "app", o.Username)
		require.Equal(t, "pw", o.Password)
		require.Nil(t, o.TLSConfig)
	})
	t.Run("file, read per connection", func(t *testing.T) {
		file := writeFile(t, "pw", "one\n")
		a, err := load(t, []string{"--redis-password-file=" + file}, nil)
		require.NoError(t, err)
		var o redis.Options
		require.NoError(t, a.Redis.Apply(&o))
		require.Empty(t, o.Password, "the file is read when a connection authenticates")
		u, p, err := o.CredentialsProviderContext(context.Background())
		require.NoError(t, err)
		require.Equal(t, "", u, "no user: the default one")
		require.Equal(t, "one", p)
		require.NoError(t, os.WriteFile(file, []byte("two\n"), 0o600))
		_, p, err = o.CredentialsProviderContext(context.Background())
		require.NoError(t, err)
		require.Equal(t, "two", p)
	})
	t.Run("tls", func(t *testing.T) {
		ca := tlstest.NewCA(t, "redis")
		a, err := load(t, []string{"--redis-tls", "--redis-tls-ca-file=" + ca.CertFile, "--redis-tls-server-name=redis.internal"}, nil)
		require.NoError(t, err)
		var o redis.Options
		require.NoError(t, a.Redis.Apply(&o))
		require.NotNil(t, o.TLSConfig)
		require.Equal(t, "redis.internal", o.TLSConfig.ServerName)
		require.False(t, o.TLSConfig.InsecureSkipVerify)
		require.NotNil(t, o.TLSConfig.RootCAs)
	})
}

func TestKafkaOptsChooseTheMechanism(t *testing.T) {
	for _, mech := range []string{"plain", "SCRAM-SHA-256", "scram-sha-512"} {
		t.Run(mech, func(t *testing.T) {
			a, err := load(t, []string{"--kafka-sasl-mechanism=" + mech, "--kafka-sasl-username=app"}, map[string]string{"SUNDIAL_KAFKA_SASL_PASSWORD": "pw"})
			require.NoError(t, err)
			opts, err := a.Kafka.Opts()
			require.NoError(t, err)
			cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers("127.0.0.1:1"))...)
			require.NoError(t, err)
			defer cl.Close()
			mechs, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism)
			require.Len(t, mechs, 1)
			require.Equal(t, strings.ToUpper(mech), mechs[0].Name())
			require.Nil(t, cl.OptValue(kgo.DialTLSConfig), "no TLS unless asked")
		})
	}
	t.Run("tls", func(t *testing.T) {
		ca := tlstest.NewCA(t, "kafka")
		a, err := load(t, []string{"--kafka-tls", "--kafka-tls-ca-file=" + ca.CertFile}, nil)
		require.NoError(t, err)
		opts, err := a.Kafka.Opts()
		require.NoError(t, err)
		cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers("127.0.0.1:1"))...)
		require.NoError(t, err)
		defer cl.Close()
		tc, _ := cl.OptValue(kgo.DialTLSConfig).(*tls.Config)
		require.NotNil(t, tc)
		require.NotNil(t, tc.RootCAs)
		require.Empty(t, cl.OptValue(kgo.SASL))
	})
}

func TestCassandraApply(t *testing.T) {
	const authenticator = "org.apache.cassandra.auth.PasswordAuthenticator"
	// PasswordAuthenticator's answer: \x00user\x00password.
	answer := func(t *testing.T, a gocql.Authenticator) string {
		t.Helper()
		resp, next, err := a.Challenge([]byte(authenticator))
		require.NoError(t, err)
		require.Nil(t, next)
		return string(resp)
	}
	t.Run("value", func(t *testing.T) {
		a, err := load(t, []string{"--cassandra-username=app"}, map[string]string{"SUNDIAL_CASSANDRA_PASSWORD": "pw"})
		require.NoError(t, err)
		var cc ledger.ConnectConfig
		require.NoError(t, a.Cassandra.Apply(&cc))
		require.IsType(t, gocql.PasswordAuthenticator{}, cc.Authenticator)
		require.Equal(t, "\x00app\x00pw", answer(t, cc.Authenticator))
	})
	t.Run("file, read per connection", func(t *testing.T) {
		file := writeFile(t, "pw", "one\n")
		a, err := load(t, []string{"--cassandra-username=app", "--cassandra-password-file=" + file}, nil)
		require.NoError(t, err)
		var cc ledger.ConnectConfig
		require.NoError(t, a.Cassandra.Apply(&cc))
		require.Equal(t, "\x00app\x00one", answer(t, cc.Authenticator))
		require.NoError(t, os.WriteFile(file, []byte("two"), 0o600))
		require.Equal(t, "\x00app\x00two", answer(t, cc.Authenticator))
		_, _, err = cc.Authenticator.Challenge([]byte("com.example.UnknownAuthenticator"))
		require.Error(t, err, "only the authenticators gocql approves are answered")
	})
	t.Run("tls", func(t *testing.T) {
		ca := tlstest.NewCA(t, "cass")
		a, err := load(t, []string{"--cassandra-tls", "--cassandra-tls-ca-file=" + ca.CertFile}, nil)
		require.NoError(t, err)
		var cc ledger.ConnectConfig
		require.NoError(t, a.Cassandra.Apply(&cc))
		require.NotNil(t, cc.TLS)
		require.False(t, cc.TLS.InsecureSkipVerify)
	})
}

func TestZooKeeperApply(t *testing.T) {
	file := writeFile(t, "pw", "s3cret\n")
	a, err := load(t, []string{"--zk-username=sundial", "--zk-password-file=" + file}, nil)
	require.NoError(t, err)
	lc := rangeleader.Config{Servers: []string{"127.0.0.1:2181"}, Path: "/x", NodeID: "n", Ranges: 1, Work: func(context.Context, rangeleader.Term) {}}
	require.NoError(t, a.ZooKeeper.Apply(&lc))
	require.Equal(t, []rangeleader.Credential{{Scheme: "digest", Payload: []byte("sundial:s3cret")}}, lc.Credentials)
	_, err = rangeleader.New(lc)
	require.NoError(t, err)
}

// tlsServer accepts TLS connections on loopback and reports the common
// name of each client certificate ("" for none) or the handshake's error.
type tlsServer struct {
	addr    string
	results chan string
	ln      net.Listener
	wg      sync.WaitGroup
}

func startTLSServer(t *testing.T, ca *tlstest.CA, server tlstest.Issued, requireClientCert bool) *tlsServer {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{server.Pair}, ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven}
	if requireClientCert {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &tlsServer{addr: ln.Addr().String(), results: make(chan string, 16), ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := tls.Server(c, cfg)
			_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
			if err := tc.Handshake(); err != nil {
				s.results <- "error: " + err.Error()
			} else if peers := tc.ConnectionState().PeerCertificates; len(peers) > 0 {
				s.results <- peers[0].Subject.CommonName
			} else {
				s.results <- ""
			}
			_ = tc.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); s.wg.Wait() })
	return s
}

// dial completes a handshake with cfg and returns what the server saw.
func (s *tlsServer) dial(t *testing.T, cfg *tls.Config) (string, error) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.addr, cfg)
	if err == nil {
		// TLS 1.3 reports a rejected client certificate on the first read.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		if errors.Is(err, net.ErrClosed) || err != nil && strings.Contains(err.Error(), "EOF") {
			err = nil
		}
		_ = c.Close()
	}
	select {
	case r := <-s.results:
		return r, err
	case <-time.After(5 * time.Second):
		t.Fatal("the server saw no handshake")
		return "", nil
	}
}

func TestTLSConfigVerifiesAndPresents(t *testing.T) {
	ca := tlstest.NewCA(t, "sundial-test")
	srv := startTLSServer(t, ca, ca.Server("server"), true)
	cl := ca.Client("client", "sundial-worker")

	good := connsec.TLS{Enabled: true, CAFile: ca.CertFile, CertFile: cl.CertFile, KeyFile: cl.KeyFile}
	cfg, err := good.Config()
	require.NoError(t, err)
	seen, err := srv.dial(t, cfg)
	require.NoError(t, err)
	require.Equal(t, "sundial-worker", seen, "the client certificate was presented")

	// A renewed certificate (the mounted Secret rewritten) is presented at
	// the next handshake, without building a new config.
	renewed := ca.Client("renewed", "sundial-worker-renewed")
	require.NoError(t, os.Rename(renewed.CertFile, cl.CertFile))
	require.NoError(t, os.Rename(renewed.KeyFile, cl.KeyFile))
	seen, err = srv.dial(t, cfg)
	require.NoError(t, err)
	require.Equal(t, "sundial-worker-renewed", seen)

	// Another CA's server is refused: the client verifies.
	other := tlstest.NewCA(t, "other")
	wrongCA, err := connsec.TLS{Enabled: true, CAFile: other.CertFile, CertFile: cl.CertFile, KeyFile: cl.KeyFile}.Config()
	require.NoError(t, err)
	_, err = srv.dial(t, wrongCA)
	var unknown x509.UnknownAuthorityError
	require.ErrorAs(t, err, &unknown)

	// A name the certificate lacks is refused.
	wrongName, err := connsec.TLS{Enabled: true, CAFile: ca.CertFile, ServerName: "redis.elsewhere", CertFile: cl.CertFile, KeyFile: cl.KeyFile}.Config()
	require.NoError(t, err)
	_, err = srv.dial(t, wrongName)
	var hostErr x509.HostnameError
	require.ErrorAs(t, err, &hostErr)

	// No client certificate: the server (mutual TLS) refuses.
	noCert, err := connsec.TLS{Enabled: true, CAFile: ca.CertFile}.Config()
	require.NoError(t, err)
	seen, _ = srv.dial(t, noCert)
	require.True(t, strings.HasPrefix(seen, "error:"), "server saw %q", seen)
}

func TestTLSOffIsNil(t *testing.T) {
	cfg, err := connsec.TLS{CAFile: "/ignored"}.Config()
	require.NoError(t, err)
	require.Nil(t, cfg)
}

// The ZooKeeper dialer does the handshake itself (the client only sees a
// net.Conn), with the host of the address as the name to verify.
func TestZooKeeperTLSDialer(t *testing.T) {
	ca := tlstest.NewCA(t, "zk")
	srv := startTLSServer(t, ca, ca.Server("zk"), false)
	z := rangeleader.Security{TLS: connsec.TLS{Enabled: true, CAFile: ca.CertFile}}
	dial, err := z.Dialer(nil)
	require.NoError(t, err)
	c, err := dial("tcp", srv.addr, 5*time.Second)
	require.NoError(t, err)
	require.IsType(t, &tls.Conn{}, c)
	require.True(t, c.(*tls.Conn).ConnectionState().HandshakeComplete)
	require.NoError(t, c.Close())
	require.Equal(t, "", <-srv.results)

	other := tlstest.NewCA(t, "other")
	z.TLS.CAFile = other.CertFile
	dial, err = z.Dialer(nil)
	require.NoError(t, err)
	_, err = dial("tcp", srv.addr, 5*time.Second)
	var unknown x509.UnknownAuthorityError
	require.ErrorAs(t, err, &unknown)
	<-srv.results
}
