package relay

import (
	"flag"
	"os"
	"strings"
	"time"

	pgoutbox "github.com/sundialhq/sundial/pkg/postgres/outbox"
	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/store/kafkaconn"
)

// Config is the relay's settings, loaded once in main.
type Config struct {
	PostgresDSN  string
	KafkaBrokers string // comma-separated host:port
	TopicPrefix  string
	// TopicPartitions and TopicReplication are used only when the relay
	// creates a missing topic at start; existing topics are left alone.
	TopicPartitions  int
	TopicReplication int
	BatchSize        int
	PollInterval     time.Duration
	PublishTimeout   time.Duration
	DepthInterval    time.Duration
	// DepthTotalInterval is how often the whole table is counted for
	// sundial_relay_outbox_rows (a scan of every row); the due rows are
	// counted every DepthInterval.
	DepthTotalInterval time.Duration
	Listen             bool
	NodeID             string
	// KafkaSecurity is TLS and SASL towards the brokers (--kafka-tls*,
	// --kafka-sasl-*; see pkg/store/kafkaconn). Off by default.
	KafkaSecurity kafkaconn.Security
}

// Defaults returns the settings a single-node development stack runs with.
func Defaults() Config {
	host, _ := os.Hostname()
	return Config{
		PostgresDSN:        "postgres://sundial:sundial@127.0.0.1:5432/sundial?sslmode=disable",
		KafkaBrokers:       "127.0.0.1:9092",
		TopicPrefix:        "sundial",
		TopicPartitions:    4,
		TopicReplication:   -1,
		BatchSize:          500,
		PollInterval:       500 * time.Millisecond,
		PublishTimeout:     10 * time.Second,
		DepthInterval:      5 * time.Second,
		DepthTotalInterval: time.Minute,
		Listen:             true,
		NodeID:             host,
	}
}

// Register adds the relay's flags to fs, defaulting to c's values.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.PostgresDSN, "postgres-dsn", c.PostgresDSN, "Postgres connection string (the outbox)")
	fs.StringVar(&c.KafkaBrokers, "kafka-brokers", c.KafkaBrokers, "comma-separated Kafka seed brokers")
	fs.StringVar(&c.TopicPrefix, "topic-prefix", c.TopicPrefix, "prefix of the firing topics (<prefix>.fire.<priority>)")
	fs.IntVar(&c.TopicPartitions, "topic-partitions", c.TopicPartitions, "partitions of a firing topic the relay creates at start")
	fs.IntVar(&c.TopicReplication, "topic-replication", c.TopicReplication, "replication factor of a created topic; -1 = broker default")
	fs.IntVar(&c.BatchSize, "batch-size", c.BatchSize, "outbox rows claimed and published per transaction")
	fs.DurationVar(&c.PollInterval, "poll-interval", c.PollInterval, "longest wait between outbox polls when no NOTIFY arrives")
	fs.DurationVar(&c.PublishTimeout, "publish-timeout", c.PublishTimeout, "longest wait for Kafka to acknowledge a batch; unacknowledged rows stay for the next claim")
	fs.DurationVar(&c.DepthInterval, "depth-interval", c.DepthInterval, "how often to count the outbox's due rows (through the publish index) for the depth metrics")
	fs.DurationVar(&c.DepthTotalInterval, "depth-total-interval", c.DepthTotalInterval, "how often to count every outbox row, due or not (a scan of the table), for sundial_relay_outbox_rows")
	fs.BoolVar(&c.Listen, "listen", c.Listen, "wake on LISTEN "+pgoutbox.Channel+"; disable behind a transaction-pooling proxy (polling only)")
	fs.StringVar(&c.NodeID, "node-id", c.NodeID, "this relay's name in logs, the Kafka client id and pg_stat_activity")
	c.KafkaSecurity.Register(fs)
}

// Brokers splits KafkaBrokers.
func (c *Config) Brokers() []string {
	var out []string
	for _, b := range strings.Split(c.KafkaBrokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// Validate records every problem, each naming its flag.
func (c *Config) Validate(p *config.Problems) {
	if c.PostgresDSN == "" {
		p.Addf("postgres-dsn", "must not be empty")
	}
	if len(c.Brokers()) == 0 {
		p.Addf("kafka-brokers", "must name at least one broker")
	}
	if c.TopicPrefix == "" {
		p.Addf("topic-prefix", "must not be empty")
	}
	if c.TopicPartitions < 1 {
		p.Addf("topic-partitions", "must be at least 1, got %d", c.TopicPartitions)
	}
	if c.TopicReplication == 0 || c.TopicReplication < -1 {
		p.Addf("topic-replication", "must be -1 (broker default) or at least 1, got %d", c.TopicReplication)
	}
	if c.BatchSize < 1 || c.BatchSize > 10000 {
		p.Addf("batch-size", "must be in [1, 10000], got %d", c.BatchSize)
	}
	if c.PollInterval <= 0 {
		p.Addf("poll-interval", "must be positive, got %s", c.PollInterval)
	}
	if c.PublishTimeout < time.Second {
		p.Addf("publish-timeout", "must be at least 1s (the Kafka client's floor), got %s", c.PublishTimeout)
	}
	if c.DepthInterval <= 0 {
		p.Addf("depth-interval", "must be positive, got %s", c.DepthInterval)
	}
	if c.DepthTotalInterval <= 0 {
		p.Addf("depth-total-interval", "must be positive, got %s", c.DepthTotalInterval)
	}
	if c.NodeID == "" {
		p.Addf("node-id", "must not be empty")
	}
	c.KafkaSecurity.Validate(p)
}
