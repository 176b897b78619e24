#!/usr/bin/env bash
# The cluster profile's ZooKeeper: a 3-node ensemble on loopback, beside (never
# instead of) the single ZooKeeper deploy/local/infra.sh runs on 2181.
#
#   zookeeper.sh up       start the nodes that are not running, wait until the ensemble has a leader
#   zookeeper.sh down     stop the three nodes, wait until they are gone
#   zookeeper.sh status   one line per node: up/down, mode (leader/follower), address, pid
#   zookeeper.sh env      export SUNDIAL_TEST_ZK_ENSEMBLE_ADDRS=... (source <(zookeeper.sh env))
#   zookeeper.sh leader   the number (1-3) of the node that leads now
#   zookeeper.sh kill N   SIGKILL node N, or the node of client port N (fault drills; `up` starts it again)
#
# Node N (1-3) serves clients on 127.0.0.1:219N, talks to its peers on 289N
# (quorum) and 389N (leader election); its data, logs and pid file live under
# .infra/zk-ensemble/N/ (SUNDIAL_INFRA_DIR moves .infra). It runs the jars
# `infra.sh up` resolved into .infra/zookeeper/lib, with a 128 MiB heap.
# CLUSTER=1 infra.sh up|down|env runs this script too (docs/operations.md).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../host.bash
source "$ROOT/deploy/local/host.bash"
# shellcheck source-path=SCRIPTDIR source=nodes.bash
source "$ROOT/deploy/local/cluster/nodes.bash"
INFRA=${SUNDIAL_INFRA_DIR:-$ROOT/.infra}
D=$INFRA/zk-ensemble
LIB=$INFRA/zookeeper/lib
HOST=127.0.0.1
NODES=(1 2 3)
CONF=zoo.cfg # node N's configuration: $D/N/conf/$CONF
READY_TIMEOUT=90
STOP_TIMEOUT=15

log() { printf '[zk-ensemble] %s\n' "$*" >&2; }
die() { printf '[zk-ensemble] error: %s\n' "$*" >&2; exit 1; }

client_port() { echo $((2190 + $1)); }
quorum_port() { echo $((2890 + $1)); }
election_port() { echo $((3890 + $1)); }

# fourlw N WORD: ZooKeeper's four-letter word WORD on node N's client port.
fourlw() {
  timeout 3 bash -c 'exec 3<>/dev/tcp/'"$HOST/$(client_port "$1")"' && printf %s "$0" >&3 && cat <&3' "$2" 2>/dev/null || true
}

mode_of() { fourlw "$1" srvr | sed -n 's/^Mode: //p'; }

start_node() {
  local n=$1 d=$D/$1 p java peers=""
  p=$(client_port "$n")
  for port in "$p" "$(quorum_port "$n")" "$(election_port "$n")"; do
    if port_open "$port"; then die "node $n: port $HOST:$port is taken by a process this script did not start"; fi
  done
  java=$(find_java17) || die "no OpenJDK 17 under /usr/lib/jvm (run deploy/local/infra.sh up first, or set SUNDIAL_JAVA)"
  ls "$LIB"/zookeeper-*.jar >/dev/null 2>&1 || die "no ZooKeeper jars in $LIB: run deploy/local/infra.sh up first (it resolves them)"
  mkdir -p "$d/conf" "$d/data" "$d/logs"
  echo "$n" >"$d/data/myid"
  for m in "${NODES[@]}"; do peers+="server.$m=$HOST:$(quorum_port "$m"):$(election_port "$m")"$'\n'; done
  # Ticks as small as the single server's (250 ms), so tests can ask for short
  # sessions; followers notice a killed leader from its closed sockets at once,
  # and a new election then takes a few ticks.
  cat >"$d/conf/zoo.cfg" <<EOF
# Written by deploy/local/cluster/zookeeper.sh: node $n of the local 3-node ensemble.
tickTime=250
minSessionTimeout=500
maxSessionTimeout=30000
initLimit=40
syncLimit=8
dataDir=$d/data
clientPort=$p
clientPortAddress=$HOST
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,isro,cons
# throwaway data: no fsync, small transaction-log preallocation
forceSync=no
preAllocSize=4096
snapCount=10000
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
$peers
EOF
  sed "s#@@LOGS@@#$d/logs#g" "$ROOT/deploy/local/zookeeper/logback.xml" >"$d/conf/logback.xml"
  rm -f "$d/pid"
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$d/pid" \
    "$java" -Xms32m -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss512k \
    -Djava.awt.headless=true -Dzookeeper.jmx.log4j.disable=true \
    -Dlogback.configurationFile="$d/conf/logback.xml" \
    -cp "$LIB/*" org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/conf/zoo.cfg" \
    >>"$d/logs/stdout.log" 2>&1 </dev/null 9>&- &
  disown || true
}

# ready: every node runs and serves, and exactly one of them leads.
ready() {
  local n m leaders=0
  for n in "${NODES[@]}"; do
    m=$(mode_of "$n")
    case $m in
      leader) leaders=$((leaders + 1)) ;;
      follower) ;;
      *) return 1 ;;
    esac
  done
  [ "$leaders" = 1 ]
}

cmd_up() {
  local t0=$SECONDS
  up_nodes ready zookeeper.log 0.25 "the ensemble has no leader"
  log "ensemble ready on $(addrs) after $((SECONDS - t0))s (started: ${STARTED[*]:-none}; leader: node $(leader))"
}

cmd_kill() {
  local n=${1:-}
  case $n in 2191 | 2192 | 2193) n=$((n - 2190)) ;; esac # a node named by its client port
  case $n in 1 | 2 | 3) ;; *) die "usage: zookeeper.sh kill <1|2|3|2191|2192|2193>" ;; esac
  is_running "$n" || die "node $n is not running"
  stop_node "$n" KILL
}

leader() {
  local n
  for n in "${NODES[@]}"; do
    if [ "$(mode_of "$n")" = leader ]; then echo "$n"; return 0; fi
  done
  return 1
}

addrs() { echo "$HOST:$(client_port 1),$HOST:$(client_port 2),$HOST:$(client_port 3)"; }

cmd_status() {
  local n rc=0 state mode pid
  for n in "${NODES[@]}"; do
    pid=-
    if is_running "$n"; then
      pid=$(pid_of "$n")
      mode=$(mode_of "$n")
      if [ -n "$mode" ]; then state=up; else state=starting; mode=-; rc=1; fi
    else
      state=down; mode=-; rc=1
    fi
    printf '%-16s %-8s %-9s %s:%-6s pid %s\n' "zk-ensemble-$n" "$state" "$mode" "$HOST" "$(client_port "$n")" "$pid"
  done
  return $rc
}

case ${1:-} in
  up) cmd_up ;;
  down) down_nodes ;;
  status) cmd_status ;;
  env) echo "export SUNDIAL_TEST_ZK_ENSEMBLE_ADDRS='$(addrs)'" ;;
  leader) leader || die "no node leads now" ;;
  kill) shift; cmd_kill "$@" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
