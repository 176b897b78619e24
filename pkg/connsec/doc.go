// Package connsec is how the services secure their connections to Redis,
// Kafka, Cassandra and ZooKeeper: TLS and credentials, from flags (or their
// SUNDIAL_* variables) and files, turned into each client's own settings;
// and how a service serves TLS on its own listeners (ServerTLS, the api's
// gRPC and HTTP ports).
// Postgres needs none of this: its DSN carries sslmode and the certificate
// paths, and pgx reads the password from PGPASSWORD.
//
// Each component has a settings struct with the shape every Sundial config
// has — Register adds its flags, Validate records problems naming the flag —
// and one method that applies it to the client:
//
//	Redis      --redis-username, --redis-password[-file]        Apply(*redis.Options)
//	Kafka      --kafka-sasl-mechanism, --kafka-sasl-username,
//	           --kafka-sasl-password[-file]                      Opts() []kgo.Opt
//	Cassandra  --cassandra-username, --cassandra-password[-file] Apply(*ledger.ConnectConfig)
//	ZooKeeper  --zk-username, --zk-password[-file] (digest)      Apply(*leader.Config)
//
// and the same TLS flags under each prefix (redis, kafka, cassandra, zk):
// --<p>-tls, --<p>-tls-ca-file, --<p>-tls-cert-file, --<p>-tls-key-file,
// --<p>-tls-server-name, --<p>-tls-insecure-skip-verify. Every default is
// today's behaviour: plaintext, no credentials.
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
