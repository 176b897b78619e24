#!/usr/bin/env bash
# A local Redis Cluster for Sundial's cluster profile: 3 primaries
# with one replica each, on 127.0.0.1 only, from Debian's redis-server (which
# deploy/local/infra.sh installs).
#
#   redis.sh up       start the nodes that are not running, create the cluster
#                     once, wait until every node says cluster_state:ok and
#                     every replica is in sync
#   redis.sh down     stop exactly the nodes `up` started (their pid files)
#   redis.sh status   one line per node: up/down, port, pid, role; exits 1 unless all are up and ok
#   redis.sh env      export SUNDIAL_TEST_REDIS_CLUSTER_ADDRS='127.0.0.1:7101,...'
#   redis.sh addrs    the nodes' addresses, comma-separated (make chaos CLUSTER=redis)
#
# Ports: SUNDIAL_REDIS_CLUSTER_PORT [7101] and the five after it (7101-7106);
# each node's cluster bus is its port + 10000. Not 7001-7006: the secure
# Cassandra node of infra.sh listens on 7002 (its storage port).
# Data, configuration, logs and pid files live under
# $SUNDIAL_INFRA_DIR/redis-cluster/ (default .infra/redis-cluster/, gitignored);
# `up` and `down` hold its .lock, so two of them never interleave.
# No persistence, as the single Redis: the data is throwaway; a node's
# nodes.conf (its view of the cluster) is kept, so a killed node started
# again by `up` rejoins, as a replica if its replica was promoted meanwhile.
# Idle cost on the 2-core machine: about 33 MiB PSS for the six nodes and
# 1.5 s of CPU a minute (2.5 % of one core: the cluster bus's pings), measured
# 2026-11-29 01:45 UTC over 64 s from /proc.
# Tests reach it through testkit/testinfra (RedisCluster, RedisClusterAddrs),
# which fail, never skip, when it is not running.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../host.bash
source "$ROOT/deploy/local/host.bash"
INFRA=${SUNDIAL_INFRA_DIR:-$ROOT/.infra}
DIR=$INFRA/redis-cluster
HOST=127.0.0.1
BASE=${SUNDIAL_REDIS_CLUSTER_PORT:-7101}
NODES=6
# A primary that does not answer for this long is failed over to its replica.
NODE_TIMEOUT_MS=${SUNDIAL_REDIS_CLUSTER_NODE_TIMEOUT_MS:-2000}
READY_TIMEOUT=60

log() { printf '[redis-cluster] %s\n' "$*" >&2; }
die() { printf '[redis-cluster] error: %s\n' "$*" >&2; exit 1; }

ports() { local i; for ((i = 0; i < NODES; i++)); do echo $((BASE + i)); done; }
addrs() { local a=() p; for p in $(ports); do a+=("$HOST:$p"); done; (IFS=,; echo "${a[*]}"); }

pid_of() { # port: the node's pid if it runs (its pid file names a live redis-server)
  local f=$DIR/$1/pid pid exe
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -n "$pid" ] && [ -e "/proc/$pid" ] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
  [[ $exe == */redis-server || $exe == */redis-check-rdb ]] || return 1
  echo "$pid"
}

cli() { local p=$1; shift; timeout 5 redis-cli -h "$HOST" -p "$p" "$@"; }

answers() { [ "$(cli "$1" ping 2>/dev/null)" = PONG ]; }

write_conf() { # port
  local p=$1 d=$DIR/$1
  mkdir -p "$d"
  cat >"$d/redis.conf" <<EOF
# Written by deploy/local/cluster/redis.sh; a node of the local Redis Cluster.
bind $HOST
port $p
protected-mode yes
daemonize yes
pidfile $d/pid
logfile $d/redis.log
loglevel notice
dir $d
save ""
appendonly no
maxclients 4000
cluster-enabled yes
cluster-config-file $d/nodes.conf
cluster-node-timeout $NODE_TIMEOUT_MS
# A shard whose primary and replica are both gone leaves the other shards serving.
cluster-require-full-coverage no
cluster-allow-reads-when-down no
EOF
}

start_node() { # port
  local p=$1
  if pid_of "$p" >/dev/null; then return 0; fi
  if answers "$p"; then die "port $p answers but is not a node this script started (see $DIR/$p)"; fi
  write_conf "$p"
  redis-server "$DIR/$p/redis.conf" >>"$DIR/$p/stdout.log" 2>&1 </dev/null 9>&- || die "node $p failed to start (see $DIR/$p/redis.log)"
}

wait_for() { # description, command...
  local what=$1 deadline=$((SECONDS + READY_TIMEOUT))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || die "timed out after ${READY_TIMEOUT}s waiting for $what"
    sleep 0.5
  done
}

all_answer() { local p; for p in $(ports); do answers "$p" || return 1; done; }

# The cluster exists once a node knows of the others (cluster_known_nodes > 1).
created() { [ "$(cli "$BASE" cluster info 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_known_nodes://p')" -gt 1 ] 2>/dev/null; }

all_ok() {
  local p
  for p in $(ports); do
    cli "$p" cluster info 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok' || return 1
  done
}

# Every node has joined: each one knows all six.
all_known() {
  local p n
  for p in $(ports); do
    n=$(cli "$p" cluster info 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_known_nodes://p')
    [ "${n:-0}" -eq "$NODES" ] || return 1
  done
}

# Every replica streams from its primary (a replica still loading could
# not take over: a failover drill right after `up` would find none).
all_synced() {
  local p r
  for p in $(ports); do
    r=$(cli "$p" info replication 2>/dev/null | tr -d '\r')
    if grep -qx 'role:slave' <<<"$r"; then grep -qx 'master_link_status:up' <<<"$r" || return 1; fi
  done
}

up() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
    die "redis-server and redis-cli are needed: run deploy/local/infra.sh up (it installs them)"
  mkdir -p "$DIR"
  hold_lock "$DIR/.lock" 300
  local p
  for p in $(ports); do start_node "$p"; done
  wait_for "every node to answer PING" all_answer
  if ! created; then
    log "creating the cluster on $(addrs)"
    # shellcheck disable=SC2046 # one argument per address
    redis-cli --cluster create $(addrs | tr , ' ') --cluster-replicas 1 --cluster-yes >"$DIR/create.log" 2>&1 ||
      die "redis-cli --cluster create failed (see $DIR/create.log)"
  fi
  wait_for "every node to know all $NODES nodes" all_known
  wait_for "cluster_state:ok on every node" all_ok
  wait_for "every replica in sync with its primary" all_synced
  log "up: $(addrs)"
}

down() {
  local p pid pids=()
  if [ -d "$DIR" ]; then hold_lock "$DIR/.lock" 300; fi
  for p in $(ports); do
    if pid=$(pid_of "$p"); then kill "$pid"; pids+=("$pid"); fi
  done
  local deadline=$((SECONDS + 15))
  for pid in "${pids[@]}"; do
    while [ -e "/proc/$pid" ]; do
      if ((SECONDS >= deadline)); then kill -9 "$pid" 2>/dev/null || true; break; fi
      sleep 0.2
    done
  done
  log "down"
}

# status exits 1 unless every node runs and says cluster_state:ok.
status() {
  local p pid role rc=0
  for p in $(ports); do
    if pid=$(pid_of "$p"); then
      role=$(cli "$p" role 2>/dev/null | head -1 || true)
      echo "redis-cluster $p up pid $pid ${role:-?}"
    else
      echo "redis-cluster $p down"
      rc=1
    fi
  done
  if all_ok 2>/dev/null; then echo "redis-cluster state ok"; else echo "redis-cluster state not ok"; rc=1; fi
  return $rc
}

env_lines() { echo "export SUNDIAL_TEST_REDIS_CLUSTER_ADDRS='$(addrs)'"; }

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  env) env_lines ;;
  addrs) addrs ;;
  *) echo "usage: $0 up|down|status|env|addrs" >&2; exit 2 ;;
esac
