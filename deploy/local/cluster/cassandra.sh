#!/usr/bin/env bash
# The cluster profile's Cassandra: a 3-node ring on loopback, beside (never
# instead of) the single node deploy/local/infra.sh runs on 9042 (and the
# secure node on 9043).
#
#   cassandra.sh up       start the nodes that are not running, wait until every node
#                         serves CQL and sees all three nodes up and normal
#   cassandra.sh down     stop the three nodes, wait until they are gone
#   cassandra.sh status   one line per node: up/starting/down, address, pid; exits 1 unless all are up
#   cassandra.sh env      export SUNDIAL_TEST_CASSANDRA_RING_HOSTS=... (source <(cassandra.sh env))
#   cassandra.sh kill N   SIGKILL node N (1-3), or the node of address 127.0.0.N+1 (fault drills)
#   cassandra.sh stop N   stop node N cleanly (SIGTERM: it drains and tells its peers)
#   cassandra.sh start N  start node N again and wait until the ring sees it up
#                         (`up` starts every node that is not running)
#   cassandra.sh ring [N] nodetool status as node N (default 1) sees the ring
#
# Node N (1-3) listens on its own loopback address 127.0.0.(N+1) (Linux
# routes all of 127/8 to lo, no alias to set up): CQL on port 9142 and the
# storage (gossip and replica) port 7300, the same ports on every node, so
# a driver that learns the ring from system.peers reaches each node on the
# port it was given. Its JMX (local only, which Cassandra binds to
# 127.0.0.1) is 730N. Configuration, data, logs and pid file live under
# .infra/cassandra-ring/N/ (SUNDIAL_INFRA_DIR moves .infra; gitignored).
# It runs the jars `infra.sh up` fetched into .infra/cassandra/lib, with
# deploy/local/cassandra/cassandra.yaml and jvm17.args rendered per node.
#
# Heap: 512 MiB a node (the single node has 2 GiB), memtables 64 MiB of it
# (an eighth, as the single node's), the size the secure node already runs
# at. Smaller heaps are possible for an idle ring, but 384 MiB leaves a
# node's memtables, key cache, hints and in-flight requests too little
# room once the ledger writes at a test's rate, and a node that dies of
# OutOfMemoryError in a failover test measures the heap, not the ring.
#
# Tokens: one token a node, spread evenly over the Murmur3 range, and
# auto_bootstrap false: a fresh ring has no data to stream, so no node
# bootstraps, and Cassandra's refusal of concurrent range movements
# (cassandra.consistent.rangemovement) never applies: the three nodes boot
# side by side. Seeds: node 1 (every node gossips with it first).
# Hinted handoff is on (the single node's template turns it off): a node
# killed for minutes gets the writes it missed from its peers' hints when
# it comes back, instead of only through read repair.
#
# Start 55 s from nothing on the 2-core machine (three JVMs booting at
# once), 34 s again, 13 s down; one node started again is back in the
# ring in 10-57 s (the machine's load decides). Idle
# about 2.7 GiB RSS (2.4 GiB PSS) for the three JVMs, 1.5 GiB of it heap,
# and 4.2 s of CPU a minute (7 % of one core), measured 2026-11-29 05:20
# UTC over 60 s from /proc (docs/reliability.md, "Clustered components").
# Not started by make test.
# CLUSTER=1 (or CLUSTER=...,cassandra,...) infra.sh up|down|status|env runs
# this script too (docs/operations.md, "Cluster profile").
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../host.bash
source "$ROOT/deploy/local/host.bash"
# shellcheck source-path=SCRIPTDIR source=nodes.bash
source "$ROOT/deploy/local/cluster/nodes.bash"
INFRA=${SUNDIAL_INFRA_DIR:-$ROOT/.infra}
D=$INFRA/cassandra-ring
LIB=$INFRA/cassandra/lib
SRC=$ROOT/deploy/local/cassandra
HOST=127.0.0.1 # JMX, and port_open's default
NODES=(1 2 3)
CONF=cassandra.yaml # node N's configuration: $D/N/conf/$CONF
READY_TIMEOUT=300
STOP_TIMEOUT=60
NATIVE_PORT=9142
STORAGE_PORT=7300

log() { printf '[cassandra-ring] %s\n' "$*" >&2; }
die() { printf '[cassandra-ring] error: %s\n' "$*" >&2; exit 1; }

addr_of() { echo "127.0.0.$(($1 + 1))"; }
jmx_port() { echo $((7300 + $1)); }
# Evenly spaced tokens: -2^63 + (N-1) * 2^64/3.
token_of() {
  case $1 in
    1) echo -9223372036854775808 ;;
    2) echo -3074457345618258603 ;;
    3) echo 3074457345618258602 ;;
  esac
}

addrs() { echo "$(addr_of 1):$NATIVE_PORT,$(addr_of 2):$NATIVE_PORT,$(addr_of 3):$NATIVE_PORT"; }

# open ADDR PORT: something accepts TCP connections there.
open() { timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

# serves N: node N answers a protocol v4 STARTUP with READY (as infra.sh's
# ready_cassandra: the port opening alone is not serving).
serves() {
  local out
  out=$(timeout 3 bash -c 'exec 3<>/dev/tcp/$0/$1 || exit 1
    printf "\x04\x00\x00\x01\x01\x00\x00\x00\x16\x00\x01\x00\x0bCQL_VERSION\x00\x053.0.0" >&3
    head -c 9 <&3 | od -An -tx1' "$(addr_of "$1")" "$NATIVE_PORT" 2>/dev/null | tr -d ' \n') || return 1
  [[ $out == 8400000102* ]]
}

# nodetool N ARGS...: Cassandra's nodetool over node N's local JMX port.
nodetool() {
  local n=$1 java mods
  shift
  java=$(find_java17) || die "no OpenJDK 17 under /usr/lib/jvm"
  # The module flags of the nodes' args file: Cassandra's tool classes need them on Java 17 too.
  mapfile -t mods < <(grep -E '^--add-(exports|opens)=' "$SRC/jvm17.args")
  # Warnings only, on stderr (without a configuration logback logs at DEBUG to stdout).
  [ -s "$D/nodetool-logback.xml" ] || printf '%s\n' '<configuration>' \
    '  <appender name="E" class="ch.qos.logback.core.ConsoleAppender"><target>System.err</target>' \
    '    <encoder><pattern>%-5level %msg%n</pattern></encoder></appender>' \
    '  <root level="WARN"><appender-ref ref="E"/></root>' '</configuration>' >"$D/nodetool-logback.xml"
  timeout 60 "$java" -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "${mods[@]}" \
    -Dlogback.configurationFile="$D/nodetool-logback.xml" -Dcassandra.storagedir="$D/$n/data" \
    -cp "$LIB/*" org.apache.cassandra.tools.NodeTool \
    -h "$HOST" -p "$(jmx_port "$n")" "$@" 2>/dev/null
}

# ring_up N: node N's nodetool status lists all three nodes Up and Normal.
ring_up() { [ "$(nodetool "$1" status | grep -c '^UN ')" = 3 ]; }

write_conf() { # N
  local n=$1 d=$D/$1 a
  a=$(addr_of "$n")
  mkdir -p "$d/conf" "$d/data" "$d/logs"
  sed -e "s#@@PORT@@#$NATIVE_PORT#g" -e "s#@@STORAGE_PORT@@#$STORAGE_PORT#g" -e "s#@@DATA@@#$d/data#g" \
    -e "s#^cluster_name: .*#cluster_name: 'sundial-local-ring'#" \
    -e "s#^initial_token: .*#initial_token: $(token_of "$n")#" \
    -e "s#^listen_address: .*#listen_address: $a#" \
    -e "s#^rpc_address: .*#rpc_address: $a#" \
    -e "s#- seeds: .*#- seeds: \"$(addr_of 1):$STORAGE_PORT\"#" \
    -e "s#^memtable_heap_space: .*#memtable_heap_space: 64MiB#" \
    -e "s#^hinted_handoff_enabled: .*#hinted_handoff_enabled: true#" \
    "$SRC/cassandra.yaml" >"$d/conf/cassandra.yaml"
  {
    echo "# Written by deploy/local/cluster/cassandra.sh: node $n of the local 3-node ring."
    cat "$d/conf/cassandra.yaml"
  } >"$d/conf/cassandra.yaml.new" && mv "$d/conf/cassandra.yaml.new" "$d/conf/cassandra.yaml"
  # Every rendered key must have taken: a template change would otherwise
  # leave a node on 127.0.0.1 or in the single node's cluster.
  if ! grep -q "^listen_address: $a\$" "$d/conf/cassandra.yaml" ||
    ! grep -q "^initial_token: $(token_of "$n")\$" "$d/conf/cassandra.yaml" ||
    ! grep -q "seeds: \"$(addr_of 1):$STORAGE_PORT\"" "$d/conf/cassandra.yaml"; then
    die "node $n: $SRC/cassandra.yaml no longer has the keys this script rewrites (listen_address, initial_token, seeds)"
  fi
  sed "s#@@LOGS@@#$d/logs#g" "$SRC/logback.xml" >"$d/conf/logback.xml"
  # The single node's args skip flushing schema changes (every test creates
  # a keyspace, and that node's data is throwaway). The ring is where a
  # node is killed and must come back with its keyspaces: unflushed, a
  # keyspace created since the last flush is gone from a SIGKILLed node's
  # schema, its commit log's writes to it are skipped on replay, and the
  # node answers "keyspace does not exist" as a coordinator.
  grep -v -e '^-Dcassandra.unsafesystem=' -e '^-Dcassandra.test.flush_local_schema_changes=' \
    "$SRC/jvm17.args" >"$d/conf/jvm17.args"
}

start_node() { # N
  local n=$1 d=$D/$1 java jamm a
  a=$(addr_of "$n")
  # A node just stopped may hold its ports for a moment: its main thread
  # is a zombie (stop_node's "gone") while other threads still exit.
  local tries=0 taken
  while :; do
    taken=
    for p in "$NATIVE_PORT" "$STORAGE_PORT"; do if open "$a" "$p"; then taken=$a:$p; fi; done
    if port_open "$(jmx_port "$n")"; then taken=$HOST:$(jmx_port "$n"); fi
    [ -n "$taken" ] || break
    tries=$((tries + 1))
    [ "$tries" -lt 20 ] || die "node $n: port $taken is taken by a process this script did not start"
    sleep 0.5
  done
  java=$(find_java17) || die "no OpenJDK 17 under /usr/lib/jvm (run deploy/local/infra.sh up first, or set SUNDIAL_JAVA)"
  jamm=$(ls "$LIB"/jamm-*.jar 2>/dev/null | head -n1)
  [ -n "$jamm" ] || die "no Cassandra jars in $LIB: run deploy/local/infra.sh up first (it fetches them)"
  write_conf "$n"
  rm -f "$d/pid"
  # The heap flags follow the args file, so they win over its 2 GiB.
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$d/pid" \
    "$java" @"$d/conf/jvm17.args" -Xms512m -Xmx512m -javaagent:"$jamm" \
    -Dcassandra.config="file://$d/conf/cassandra.yaml" \
    -Dcassandra.storagedir="$d/data" -Dcassandra.logdir="$d/logs" \
    -Dcassandra.jmx.local.port="$(jmx_port "$n")" \
    -Dlogback.configurationFile="$d/conf/logback.xml" \
    -cp "$d/conf:$LIB/*" org.apache.cassandra.service.CassandraDaemon \
    >>"$d/logs/stdout.log" 2>&1 </dev/null 9>&- &
  disown || true
}

# ready: every node serves CQL, and node 1 (the seed) sees all three Up and
# Normal. Polled every few seconds: each nodetool call is a JVM.
ready() {
  local n
  for n in "${NODES[@]}"; do serves "$n" || return 1; done
  ring_up 1
}

cmd_up() {
  local t0=$SECONDS
  up_nodes ready system.log 3 "the ring is not up (3 nodes UN)"
  log "ring ready on $(addrs) after $((SECONDS - t0))s (started: ${STARTED[*]:-none})"
}

node_arg() { # N or 127.0.0.N+1 -> N
  local n=${1:-}
  case $n in 127.0.0.2 | 127.0.0.3 | 127.0.0.4) n=$((${n##*.} - 1)) ;; esac
  case $n in 1 | 2 | 3) echo "$n" ;; *) die "usage: cassandra.sh $2 <1|2|3|127.0.0.2|127.0.0.3|127.0.0.4>" ;; esac
}

cmd_kill() {
  local n
  n=$(node_arg "${1:-}" kill)
  is_running "$n" || die "node $n is not running"
  stop_node "$n" KILL
}

cmd_stop() {
  local n
  n=$(node_arg "${1:-}" stop)
  hold_lock "$D/.lock" 300
  stop_node "$n" TERM
}

cmd_start() {
  local n t0=$SECONDS m
  n=$(node_arg "${1:-}" start)
  mkdir -p "$D"
  hold_lock "$D/.lock" 300
  if ! is_running "$n"; then start_node "$n"; fi
  # Up once it serves and another node (the seed, or node 2 when the seed
  # is the one started) sees it, with the rest, Up and Normal.
  m=1
  [ "$n" != 1 ] || m=2
  until serves "$n" && ring_up "$m"; do
    if ! is_running "$n" && [ $((SECONDS - t0)) -ge 5 ]; then
      tail -n 20 "$D/$n/logs/system.log" >&2 2>/dev/null || true
      die "node $n exited while starting (logs: $D/$n/logs/)"
    fi
    [ $((SECONDS - t0)) -lt "$READY_TIMEOUT" ] || die "node $n not up in the ring after ${READY_TIMEOUT}s"
    sleep 2
  done
  log "node $n up in the ring after $((SECONDS - t0))s"
}

cmd_status() {
  local n rc=0 state pid
  for n in "${NODES[@]}"; do
    pid=-
    if is_running "$n"; then
      pid=$(pid_of "$n")
      if serves "$n"; then state=up; else state=starting; rc=1; fi
    else
      state=down; rc=1
    fi
    printf '%-18s %-8s %s:%-6s pid %s\n' "cassandra-ring-$n" "$state" "$(addr_of "$n")" "$NATIVE_PORT" "$pid"
  done
  return $rc
}

case ${1:-} in
  up) cmd_up ;;
  down) down_nodes ;;
  status) cmd_status ;;
  env) echo "export SUNDIAL_TEST_CASSANDRA_RING_HOSTS='$(addrs)'" ;;
  kill) shift; cmd_kill "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  start) shift; cmd_start "$@" ;;
  ring) nodetool "${2:-1}" status ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
