// The admin calls deploy/local/cluster/kafka.sh needs from the three-broker
// Kafka cluster, through the Admin client of the kafka-clients jar that
// `infra.sh up` already resolved (the topic tools are a separate download).
// kafka.sh runs it with Java's single-file source launcher:
//
//   java -cp '.infra/kafka/lib/*' KafkaClusterAdmin.java BOOTSTRAP ready TOPIC
//       create TOPIC (1 partition, replication factor 3) unless it exists,
//       then exit 0 once it has a leader and all 3 replicas in sync
//       (exit 1 otherwise, saying what is missing)
//   java ... KafkaClusterAdmin.java BOOTSTRAP leaders TOPIC
//       one line per partition: "PARTITION LEADER_NODE isr=N,N,N"
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.TopicExistsException;

public class KafkaClusterAdmin {
  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: KafkaClusterAdmin BOOTSTRAP ready|leaders TOPIC");
      System.exit(2);
    }
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
    p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "10000");
    try (Admin admin = Admin.create(p)) {
      switch (args[1]) {
        case "ready" -> System.exit(ready(admin, args[2]));
        case "leaders" -> leaders(admin, args[2]);
        default -> {
          System.err.println("unknown command " + args[1]);
          System.exit(2);
        }
      }
    } catch (ExecutionException e) {
      // The broker's answer (no such topic, no leader yet, ...), not a stack trace.
      System.err.println(args[1] + " " + args[2] + ": " + e.getCause().getMessage());
      System.exit(1);
    }
  }

  static int ready(Admin admin, String topic) throws Exception {
    try {
      admin.createTopics(List.of(new NewTopic(topic, 1, (short) 3))).all().get();
    } catch (ExecutionException e) {
      if (!(e.getCause() instanceof TopicExistsException)) {
        System.err.println("create " + topic + ": " + e.getCause());
        return 1;
      }
    }
    TopicPartitionInfo pi = describe(admin, topic).partitions().get(0);
    if (pi.leader() == null || pi.leader().isEmpty() || pi.replicas().size() != 3 || pi.isr().size() != 3) {
      System.err.println(topic + ": leader " + pi.leader() + ", " + pi.replicas().size() + " replicas, " + pi.isr().size() + " in sync");
      return 1;
    }
    return 0;
  }

  static void leaders(Admin admin, String topic) throws Exception {
    for (TopicPartitionInfo pi : describe(admin, topic).partitions()) {
      String leader = pi.leader() == null || pi.leader().isEmpty() ? "none" : Integer.toString(pi.leader().id());
      String isr = pi.isr().stream().map(n -> Integer.toString(n.id())).collect(Collectors.joining(","));
      System.out.println(pi.partition() + " " + leader + " isr=" + isr);
    }
  }

  static TopicDescription describe(Admin admin, String topic) throws Exception {
    Map<String, TopicDescription> d = admin.describeTopics(List.of(topic)).allTopicNames().get();
    return d.get(topic);
  }
}
