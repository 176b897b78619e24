#!/usr/bin/env bash
# The cluster profile's Kafka: 3 Kafka 3.9 brokers in KRaft mode on loopback,
# each a combined broker and controller (a 3-voter quorum), beside (never
# instead of) the single broker deploy/local/infra.sh runs on 9092.
#
#   kafka.sh up            start the nodes that are not running, wait until all three are
#                          registered and a test topic has 3 replicas in sync
#   kafka.sh down          stop the three nodes, wait until they are gone
#   kafka.sh status        one line per node: up/starting/down, address, pid; exits 1 unless all are up
#   kafka.sh env           export SUNDIAL_TEST_KAFKA_CLUSTER_BROKERS=... (source <(kafka.sh env))
#   kafka.sh kill N        SIGKILL node N (1-3), or the node of broker port N (fault drills; `up` starts it again)
#   kafka.sh leaders TOPIC one line per partition: "PARTITION LEADER_NODE isr=N,N,N"
#
# Node N (1-3) has node.id N, serves clients on 127.0.0.1:919N and the
# controller quorum on 929N; its configuration, data, logs and pid file live
# under .infra/kafka-cluster/N/ (SUNDIAL_INFRA_DIR moves .infra; gitignored).
# It runs the jars `infra.sh up` resolved into .infra/kafka/lib, with a
# 256 MiB heap. Topics default to replication factor 3 with
# min.insync.replicas=2 (so acks=all survives one broker down), the offsets
# topic too. The admin calls (topic readiness, leaders) are
# KafkaClusterAdmin.java beside this script, compiled once into
# .infra/kafka-cluster/tools/ with the JDK's javac.
# Start 16 s from nothing, 10 s again; idle about 372 MiB PSS for the three
# JVMs and 6.3 s of CPU a minute (10 % of one core), measured 2026-11-29
# 02:35 UTC over 60 s from /proc. Not started by make test (docs/operations.md).
# CLUSTER=1 (or CLUSTER=...,kafka,...) infra.sh up|down|status|env runs this
# script too (docs/operations.md, "Cluster profile").
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../host.bash
source "$ROOT/deploy/local/host.bash"
# shellcheck source-path=SCRIPTDIR source=nodes.bash
source "$ROOT/deploy/local/cluster/nodes.bash"
INFRA=${SUNDIAL_INFRA_DIR:-$ROOT/.infra}
D=$INFRA/kafka-cluster
LIB=$INFRA/kafka/lib
HOST=127.0.0.1
NODES=(1 2 3)
CONF=server.properties # node N's configuration: $D/N/conf/$CONF
READY_TIMEOUT=180
STOP_TIMEOUT=30
# The topic `up` creates (replication factor 3) to prove the cluster places replicas.
READY_TOPIC=sundial.cluster.ready

log() { printf '[kafka-cluster] %s\n' "$*" >&2; }
die() { printf '[kafka-cluster] error: %s\n' "$*" >&2; exit 1; }

broker_port() { echo $((9190 + $1)); }
controller_port() { echo $((9290 + $1)); }

addrs() { echo "$HOST:$(broker_port 1),$HOST:$(broker_port 2),$HOST:$(broker_port 3)"; }

# brokers_seen N: how many live brokers node N's Metadata v0 answer lists
# (a KRaft broker lists only registered, unfenced brokers); empty if it does not answer.
brokers_seen() {
  local out
  out=$(timeout 3 bash -c 'exec 3<>/dev/tcp/$0/$1 || exit 1
    # size=14 | api_key=3 api_version=0 correlation_id=7 client_id="" topics=[] (all)
    printf "\x00\x00\x00\x0e\x00\x03\x00\x00\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00" >&3
    head -c 12 <&3 | od -An -tx1' "$HOST" "$(broker_port "$1")" 2>/dev/null | tr -d ' \n') || return 0
  # bytes 4-7 correlation id 7, bytes 8-11 number of brokers
  if [[ $out == ????????00000007* ]] && [ ${#out} -eq 24 ]; then echo $((16#${out:16:8})); fi
}

write_conf() { # N
  local n=$1 d=$D/$1 voters="" m
  for m in "${NODES[@]}"; do voters+="${voters:+,}$m@$HOST:$(controller_port "$m")"; done
  mkdir -p "$d/conf" "$d/data" "$d/logs"
  cat >"$d/conf/server.properties" <<EOF
# Written by deploy/local/cluster/kafka.sh: node $n of the local 3-broker Kafka
# cluster (KRaft, combined broker and controller, 3 voters).
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://$HOST:$(broker_port "$n"),CONTROLLER://$HOST:$(controller_port "$n")
advertised.listeners=PLAINTEXT://$HOST:$(broker_port "$n")
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$d/data

# Every topic, the internal ones included, on all three brokers; acks=all needs
# two of them in sync, so one broker down loses nothing and stops nothing.
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
unclean.leader.election.enable=false

# A killed broker is fenced (and its partitions' leadership moved) after 3 s
# without a heartbeat, not Kafka's default 9 s.
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000

# As the single broker (deploy/local/kafka/server.properties).
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
auto.create.topics.enable=true
num.partitions=4
delete.topic.enable=true
offsets.topic.num.partitions=1
transaction.state.log.num.partitions=1

# Light on a 2-core box.
num.network.threads=1
num.io.threads=2
background.threads=2
num.recovery.threads.per.data.dir=1
num.replica.fetchers=1
log.cleaner.dedupe.buffer.size=2097152
log.segment.bytes=16777216
log.retention.hours=24
log.retention.check.interval.ms=60000
EOF
  sed "s#@@LOGS@@#$d/logs#g" "$ROOT/deploy/local/kafka/log4j.properties" >"$d/conf/log4j.properties"
}

# cluster_id: one id for the three log directories, made once and kept.
cluster_id() {
  if [ ! -s "$D/cluster-id" ]; then
    # 16 random bytes, URL-safe base64 without padding (as infra.sh's broker).
    head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' >"$D/cluster-id"
  fi
  cat "$D/cluster-id"
}

start_node() { # N
  local n=$1 d=$D/$1 java port
  for port in "$(broker_port "$n")" "$(controller_port "$n")"; do
    if port_open "$port"; then die "node $n: port $HOST:$port is taken by a process this script did not start"; fi
  done
  java=$(find_java17) || die "no OpenJDK 17 under /usr/lib/jvm (run deploy/local/infra.sh up first, or set SUNDIAL_JAVA)"
  ls "$LIB"/kafka_2.13-*.jar >/dev/null 2>&1 || die "no Kafka jars in $LIB: run deploy/local/infra.sh up first (it resolves them)"
  write_conf "$n"
  local klog=(-Dlog4j.configuration="file:$d/conf/log4j.properties" -Dkafka.logs.dir="$d/logs")
  if [ ! -f "$d/data/meta.properties" ]; then
    # Passed as --cluster-id=…: an id starting with "-" would read as an option.
    "$java" -Xmx128m -XX:TieredStopAtLevel=1 "${klog[@]}" -cp "$LIB/*" kafka.tools.StorageTool format \
      --ignore-formatted --cluster-id="$(cluster_id)" -c "$d/conf/server.properties" >"$d/logs/format.log" 2>&1 ||
      { tail -n 20 "$d/logs/format.log" >&2; die "node $n: storage format failed"; }
  fi
  rm -f "$d/pid"
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$d/pid" \
    "$java" -Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss512k \
    -Djava.awt.headless=true "${klog[@]}" \
    -cp "$LIB/*" kafka.Kafka "$d/conf/server.properties" \
    >>"$d/logs/stdout.log" 2>&1 </dev/null 9>&- &
  disown || true
}

# admin ARGS...: KafkaClusterAdmin.java, compiled when the source changed.
admin() {
  local src=$ROOT/deploy/local/cluster/KafkaClusterAdmin.java out=$D/tools java javac want
  java=$(find_java17) || die "no OpenJDK 17 under /usr/lib/jvm"
  javac=$(dirname "$(readlink -f "$java")")/javac
  want=$(sha256sum "$src" | cut -d' ' -f1)
  if [ "$(cat "$out/source.sha256" 2>/dev/null)" != "$want" ]; then
    [ -x "$javac" ] || die "no javac beside $java (Debian's openjdk-17-jdk-headless)"
    rm -rf "$out" && mkdir -p "$out"
    "$javac" -J-XX:TieredStopAtLevel=1 -nowarn -d "$out" -cp "$LIB/*" "$src" || die "cannot compile $src"
    echo "$want" >"$out/source.sha256"
  fi
  printf 'log4j.rootLogger=ERROR, stderr\nlog4j.appender.stderr=org.apache.log4j.ConsoleAppender\nlog4j.appender.stderr.Target=System.err\nlog4j.appender.stderr.layout=org.apache.log4j.PatternLayout\nlog4j.appender.stderr.layout.ConversionPattern=%%-5p %%m%%n\n' >"$out/log4j.properties"
  "$java" -Xmx64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j.configuration="file:$out/log4j.properties" \
    -cp "$out:$LIB/*" KafkaClusterAdmin "$(addrs)" "$@"
}

# registered: every node answers and lists all three brokers.
registered() {
  local n
  for n in "${NODES[@]}"; do [ "$(brokers_seen "$n")" = 3 ] || return 1; done
}

cmd_up() {
  local t0=$SECONDS
  up_nodes registered server.log 0.5 "not all three brokers registered"
  # Registered is not yet serving: a topic must get three replicas, all in sync
  # (a broker started again catches up on its replicas first).
  until admin ready "$READY_TOPIC" 2>"$D/ready.err"; do
    if [ $((SECONDS - t0)) -ge "$READY_TIMEOUT" ]; then
      cat "$D/ready.err" >&2
      die "topic $READY_TOPIC has no 3 in-sync replicas after ${READY_TIMEOUT}s"
    fi
    sleep 1
  done
  log "cluster ready on $(addrs) after $((SECONDS - t0))s (started: ${STARTED[*]:-none})"
}

cmd_kill() {
  local n=${1:-} lo hi
  lo=$(broker_port 1)
  hi=$(broker_port 3)
  if [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge "$lo" ] && [ "$n" -le "$hi" ]; then n=$((n - lo + 1)); fi
  case $n in 1 | 2 | 3) ;; *) die "usage: kafka.sh kill <1|2|3|$lo|$((lo + 1))|$hi>" ;; esac
  is_running "$n" || die "node $n is not running"
  stop_node "$n" KILL
}

cmd_status() {
  local n rc=0 state seen pid
  for n in "${NODES[@]}"; do
    pid=-
    if is_running "$n"; then
      pid=$(pid_of "$n")
      seen=$(brokers_seen "$n")
      if [ -n "$seen" ] && [ "$seen" -gt 0 ]; then state=up; else state=starting; rc=1; fi
    else
      state=down; seen=-; rc=1
    fi
    printf '%-16s %-8s %s:%-6s brokers seen %-2s pid %s\n' "kafka-cluster-$n" "$state" "$HOST" "$(broker_port "$n")" "${seen:--}" "$pid"
  done
  return $rc
}

case ${1:-} in
  up) cmd_up ;;
  down) down_nodes ;;
  status) cmd_status ;;
  env) echo "export SUNDIAL_TEST_KAFKA_CLUSTER_BROKERS='$(addrs)'" ;;
  kill) shift; cmd_kill "$@" ;;
  leaders)
    [ -n "${2:-}" ] || die "usage: kafka.sh leaders TOPIC"
    admin leaders "$2" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
