// Package connsec is what the services' connections to Redis, Kafka,
// Cassandra and ZooKeeper share to be secured: client TLS (TLS), passwords
// given as a value or a file (Password, Secret), and the flags and checks
// built on them; and how a service serves TLS on its own listeners
// (ServerTLS, the api's gRPC and HTTP ports).
// Postgres needs none of this: its DSN carries sslmode and the certificate
// paths, and pgx reads the password from PGPASSWORD.
//
// Each component's settings live with the package that is its client, so
// that a service links only the clients it uses (connsec imports none):
//
//	lease.Security      --redis-username, --redis-password[-file]        Apply(*redis.Options)
//	kafkaconn.Security  --kafka-sasl-mechanism, --kafka-sasl-username,
//	                    --kafka-sasl-password[-file]                      Opts() []kgo.Opt
//	ledger.Security     --cassandra-username, --cassandra-password[-file] Apply(*ledger.ConnectConfig)
//	leader.Security     --zk-username, --zk-password[-file] (digest)      Apply(*leader.Config)
//
// Each has the shape every Sundial config has — Register adds its flags,
// Validate records problems naming the flag — and registers the same TLS
// flags under its prefix (redis, kafka, cassandra, zk) with TLS.Register:
// --<p>-tls, --<p>-tls-ca-file, --<p>-tls-cert-file, --<p>-tls-key-file,
// --<p>-tls-server-name, --<p>-tls-insecure-skip-verify. Every default is
// today's behaviour: plaintext, no credentials. This package's tests cover
// the four together, registered on one flag set as a service would; each
// client package tests its handshakes against a real or in-process server.
//
// # Passwords
//
// A password comes from its flag's environment variable (a Kubernetes
// secretKeyRef) or from a file (a mounted Secret); the flag itself exists so
// that the variable does, and a value typed on the command line would show
// in ps. Passwords are held as Secret, which prints as [redacted] through
// fmt, slog and flag, so a logged configuration never shows one.
//
// A password file is read again each time a Redis, Kafka or Cassandra
// connection authenticates, and a client certificate each time a TLS
// handshake asks for one: the kubelet replaces a mounted Secret's files in
// place, so a rotated password or certificate is used by the next new
// connection without a restart. The CA bundle is read once, at start. The
// ZooKeeper password is read once too: the client sends it once per session
// and replays its own copy on every reconnection.
//
// # Serving TLS
//
// ServerTLS (--tls-cert-file, --tls-key-file, --tls-client-ca-file,
// --tls-min-version) is the server side: Load gives a ServerCerts whose
// Config serves the current certificate and, for mutual TLS, requires a
// client certificate from the current CA bundle. Both are looked at (one
// stat per file) at each handshake and loaded again when they changed, so
// cert-manager's renewals and CA rotations need no restart; a change that
// does not load (a certificate written before its key) is logged and the
// previous material keeps serving. IsLoopback tells the addresses where
// plaintext is acceptable by default from the others.
package connsec
