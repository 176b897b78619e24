#!/usr/bin/env bash
# The cluster profile's Postgres: a primary and a streaming standby, two
# PostgreSQL 15 clusters of their own on 127.0.0.1:5441 and :5442, beside
# (never touching) the single cluster deploy/local/infra.sh runs on 5432.
#
#   postgres.sh up            start the pair; heal it after a failover (the node that is down or
#                             no longer the primary is rebuilt as a standby of the one that is)
#   postgres.sh down          stop both clusters (fast shutdown), wait until they are gone
#   postgres.sh status        one line per node: up/down, primary/standby, address, pid
#   postgres.sh env           export SUNDIAL_TEST_PG_HA_DSN=... (a multi-host DSN, read-write)
#   postgres.sh primary       the port of the node that is primary now
#   postgres.sh kill-primary  stop the primary the way a crash does (pg_ctl stop -m immediate)
#   postgres.sh promote       promote the standby (pg_ctl promote) and let it commit alone
#
# The nodes are "a" (5441) and "b" (5442) under .infra/pg-ha/ (SUNDIAL_INFRA_DIR
# moves .infra); either may be the primary, a failover swaps them. Replication
# is synchronous (synchronous_standby_names = '*', synchronous_commit = on):
# a commit is acknowledged once the standby has the WAL, so a promotion loses
# nothing acknowledged. The setting lives in each node's own run/sync.conf,
# '*' on the primary and '' on the standby, so the promoted standby commits
# alone at once (it has no standby to wait for until the next `up` rebuilds one).
# fsync is off on both (throwaway data, like the main cluster): the pair
# survives a process's death, not the machine's. docs/reliability.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../host.bash
source "$ROOT/deploy/local/host.bash"
INFRA=${SUNDIAL_INFRA_DIR:-$ROOT/.infra}
D=$INFRA/pg-ha
HOST=127.0.0.1
PGBIN=/usr/lib/postgresql/15/bin
NODES=(a b)
declare -A PORT=([a]=5441 [b]=5442)

log() { printf '[pg-ha] %s\n' "$*" >&2; }
die() { printf '[pg-ha] error: %s\n' "$*" >&2; exit 1; }

other() { if [ "$1" = a ]; then echo b; else echo a; fi; }
as_pg() { runuser -u postgres -- "$@"; }

pid_of() { [ -s "$D/$1/data/postmaster.pid" ] && head -n1 "$D/$1/data/postmaster.pid" | tr -dc '0-9'; return 0; }

is_running() {
  local pid cmd
  pid=$(pid_of "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmd == *"$D/$1/data"* ]]
}

# sql N QUERY: one value from node N, over its socket (trusted locally).
sql() { as_pg psql -h "$D/$1/run" -p "${PORT[$1]}" -U sundial -d postgres -XtAqc "$2" 2>/dev/null || true; }

role() { # N -> primary | standby | (nothing when it does not answer)
  case $(sql "$1" 'select pg_is_in_recovery()') in
    f) echo primary ;;
    t) echo standby ;;
  esac
}

# timeline N: the timeline of node N's last checkpoint (its pg_control), 0 without data.
timeline() {
  [ -f "$D/$1/data/PG_VERSION" ] || { echo 0; return; }
  as_pg "$PGBIN/pg_controldata" -D "$D/$1/data" | sed -n "s/^Latest checkpoint's TimeLineID: *//p"
}

in_recovery_on_disk() { [ -f "$D/$1/data/standby.signal" ]; }

prepare_dirs() {
  mkdir -p "$D"
  # postgres refuses to run as root: the clusters belong to the postgres user,
  # which must be able to walk down to them (infra.sh's own cluster needs the
  # same for .infra/, so normally it already can).
  local dir=$D ancestors=()
  while [ "$dir" != / ]; do ancestors=("$dir" "${ancestors[@]}"); dir=$(dirname "$dir"); done
  for dir in "${ancestors[@]}"; do as_pg test -x "$dir" || chmod o+x "$dir"; done
  local n
  for n in "${NODES[@]}"; do
    mkdir -p "$D/$n/run" "$D/$n/logs"
    chown postgres: "$D/$n" "$D/$n/run" "$D/$n/logs"
  done
}

# configure N: node N's own settings, in ha.conf (included by postgresql.conf) and pg_hba.conf.
configure() {
  local n=$1 d=$D/$1
  cat >"$d/run/ha.conf" <<EOF
# Written by deploy/local/cluster/postgres.sh: node $n of the local primary/standby pair.
listen_addresses = '$HOST'
port = ${PORT[$n]}
unix_socket_directories = '$d/run'
hba_file = '$d/run/pg_hba.conf'
max_connections = 100
shared_buffers = 32MB
wal_level = replica
max_wal_senders = 5
wal_keep_size = 256MB
hot_standby = on
wal_receiver_status_interval = 1s
# Synchronous replication: an acknowledged commit is on both nodes. Whom this
# node waits for is in sync.conf (set_sync): '*' while it is the primary and
# its standby streams, '' otherwise.
synchronous_commit = on
include_if_exists = '$d/run/sync.conf'
# Throwaway data: survives a process's death, not the machine's.
fsync = off
full_page_writes = off
password_encryption = 'scram-sha-256'
log_line_prefix = '%m [%p] %q%u@%d '
timezone = 'UTC'
log_timezone = 'UTC'
EOF
  cat >"$d/run/pg_hba.conf" <<EOF
local    all          all                                trust
host     all          all                127.0.0.1/32    scram-sha-256
local    replication  all                                trust
host     replication  all                127.0.0.1/32    scram-sha-256
EOF
  [ -f "$d/run/sync.conf" ] || echo "synchronous_standby_names = ''" >"$d/run/sync.conf"
  chown postgres: "$d/run/ha.conf" "$d/run/pg_hba.conf" "$d/run/sync.conf"
  grep -q "include_if_exists = '$d/run/ha.conf'" "$d/data/postgresql.conf" ||
    echo "include_if_exists = '$d/run/ha.conf'" >>"$d/data/postgresql.conf"
}

start_node() {
  local n=$1
  is_running "$n" && return 0
  if port_open "${PORT[$n]}"; then die "node $n: port $HOST:${PORT[$n]} is taken by a process this script did not start"; fi
  configure "$n"
  as_pg "$PGBIN/pg_ctl" -D "$D/$n/data" -l "$D/$n/logs/postgres.log" -w -t 60 -s start >/dev/null </dev/null 9>&- ||
    { tail -n 20 "$D/$n/logs/postgres.log" >&2; die "node $n: pg_ctl start failed"; }
}

# set_sync N VALUE: node N waits for VALUE's standbys at commit ('*' or '');
# reloaded at once when it runs.
set_sync() {
  echo "synchronous_standby_names = '$2'" >"$D/$1/run/sync.conf"
  chown postgres: "$D/$1/run/sync.conf"
  if is_running "$1"; then sql "$1" "select pg_reload_conf()" >/dev/null; fi
}

stop_node() { # N MODE
  is_running "$1" || return 0
  as_pg "$PGBIN/pg_ctl" -D "$D/$1/data" -m "$2" -w -t 60 -s stop >/dev/null || die "node $1: pg_ctl stop -m $2 failed"
}

init_primary() {
  local n=$1 d=$D/$1
  log "node $n: initdb (superuser sundial, password sundial)"
  rm -rf "$d/data" && install -d -o postgres -g postgres -m 700 "$d/data"
  printf 'sundial\n' >"$d/run/pwfile" && chown postgres: "$d/run/pwfile" && chmod 600 "$d/run/pwfile"
  as_pg "$PGBIN/initdb" -D "$d/data" --username=sundial --pwfile="$d/run/pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 --encoding=UTF8 --locale=C >"$d/logs/initdb.log" 2>&1 ||
    { rm -f "$d/run/pwfile"; tail -n 20 "$d/logs/initdb.log" >&2; die "node $n: initdb failed"; }
  rm -f "$d/run/pwfile"
}

# rebuild_standby N: node N's data replaced by a base backup of the primary P (the other node).
rebuild_standby() {
  local n=$1 p d=$D/$1
  p=$(other "$n")
  stop_node "$n" immediate
  log "node $n: pg_basebackup from node $p (port ${PORT[$p]}), as its standby"
  rm -rf "$d/data" && install -d -o postgres -g postgres -m 700 "$d/data"
  as_pg "$PGBIN/pg_basebackup" -h "$D/$p/run" -p "${PORT[$p]}" -U sundial -D "$d/data" -R -X stream -c fast \
    >"$d/logs/basebackup.log" 2>&1 || { tail -n 20 "$d/logs/basebackup.log" >&2; die "node $n: pg_basebackup failed"; }
  # The copy includes the primary's ha.conf; configure (in start_node) includes this node's own.
  sed -i '/^include_if_exists = /d' "$d/data/postgresql.conf"
  start_node "$n"
}

# pick_primary: the node to keep as the primary: a running primary, else the
# node with data that was a primary at the highest timeline.
pick_primary() {
  local n best= bt=-1 t
  for n in "${NODES[@]}"; do
    if is_running "$n" && [ "$(role "$n")" = primary ]; then
      t=$(sql "$n" "select timeline_id from pg_control_checkpoint()")
      if [ "${t:-0}" -gt "$bt" ]; then best=$n; bt=${t:-0}; fi
    fi
  done
  if [ -n "$best" ]; then echo "$best"; return; fi
  for n in "${NODES[@]}"; do
    [ -f "$D/$n/data/PG_VERSION" ] || continue
    in_recovery_on_disk "$n" && continue
    t=$(timeline "$n")
    if [ "${t:-0}" -gt "$bt" ]; then best=$n; bt=${t:-0}; fi
  done
  echo "$best"
}

streaming() { # P: does the primary P have a streaming standby?
  [ "$(sql "$1" "select count(*) from pg_stat_replication where state = 'streaming'")" -ge 1 ] 2>/dev/null
}

cmd_up() {
  command -v runuser >/dev/null && [ -x "$PGBIN/postgres" ] || die "PostgreSQL 15 is missing: run deploy/local/infra.sh up first (it installs it)"
  [ "$(id -u)" = 0 ] || die "run as root: the clusters run as the postgres user"
  prepare_dirs
  hold_lock "$D/.lock" 300
  local t0=$SECONDS p s
  p=$(pick_primary)
  if [ -z "$p" ]; then
    p=a
    init_primary "$p"
  fi
  start_node "$p"
  [ "$(role "$p")" = primary ] || die "node $p was chosen as the primary but is in recovery"
  s=$(other "$p")
  set_sync "$s" ""
  # (before sync.conf, an older script set it with ALTER SYSTEM)
  sql "$p" "alter system reset synchronous_standby_names" >/dev/null
  if [ -z "$(sql "$p" "select 1 from pg_database where datname = 'sundial'")" ]; then
    # no standby yet may be waited for: create the database first
    set_sync "$p" ""
    as_pg psql -h "$D/$p/run" -p "${PORT[$p]}" -U sundial -d postgres -XqAc 'create database sundial' >/dev/null
  fi
  # The other node stays only if it runs as a standby streaming from p; else it
  # is rebuilt (it was down, or it is a former primary whose history forked).
  if ! { is_running "$s" && [ "$(role "$s")" = standby ] && streaming "$p"; }; then
    if is_running "$s" && [ "$(role "$s")" = standby ]; then
      # just started: give it a moment to connect before judging it
      local w=$((SECONDS + 10))
      while ! streaming "$p" && [ "$SECONDS" -lt "$w" ]; do sleep 0.2; done
    fi
    if ! streaming "$p"; then
      if [ -f "$D/$s/data/standby.signal" ] && ! is_running "$s"; then
        start_node "$s"
        local w=$((SECONDS + 10))
        while ! streaming "$p" && [ "$SECONDS" -lt "$w" ]; do sleep 0.2; done
      fi
      streaming "$p" || rebuild_standby "$s"
    fi
  fi
  local deadline=$((SECONDS + 60))
  while ! streaming "$p"; do
    [ "$SECONDS" -lt "$deadline" ] || { tail -n 20 "$D/$s/logs/postgres.log" >&2; die "node $s does not stream from node $p after 60s"; }
    sleep 0.2
  done
  set_sync "$p" "*"
  log "pair ready after $((SECONDS - t0))s: primary node $p ($HOST:${PORT[$p]}), synchronous standby node $s ($HOST:${PORT[$s]})"
}

cmd_down() {
  [ -d "$D" ] || return 0
  hold_lock "$D/.lock" 300
  local n
  for n in "${NODES[@]}"; do stop_node "$n" fast & done
  wait
  for n in "${NODES[@]}"; do if is_running "$n"; then die "node $n is still running"; fi; done
  log "pair stopped"
}

running_primary() {
  local n
  for n in "${NODES[@]}"; do
    if is_running "$n" && [ "$(role "$n")" = primary ]; then echo "$n"; return 0; fi
  done
  return 1
}

cmd_kill_primary() {
  local p
  p=$(running_primary) || die "no primary is running"
  stop_node "$p" immediate
  log "node $p (${PORT[$p]}) stopped like a crash (pg_ctl stop -m immediate)"
}

cmd_promote() {
  local n s=
  for n in "${NODES[@]}"; do
    if is_running "$n" && [ "$(role "$n")" = standby ]; then s=$n; fi
  done
  [ -n "$s" ] || die "no standby is running"
  # A standby's sync.conf says '' (cmd_up): once promoted it commits alone
  # at once, not waiting for a standby that does not exist.
  as_pg "$PGBIN/pg_ctl" -D "$D/$s/data" -w -t 60 -s promote || die "node $s: pg_ctl promote failed"
  log "node $s (${PORT[$s]}) promoted; it commits without a standby until the next 'postgres.sh up'"
}

cmd_status() {
  local n rc=0 pid state r
  for n in "${NODES[@]}"; do
    pid=-
    if is_running "$n"; then
      pid=$(pid_of "$n")
      r=$(role "$n")
      if [ -n "$r" ]; then state=up; else state=starting; r=-; rc=1; fi
    else
      state=down; r=-; rc=1
    fi
    printf '%-16s %-8s %-8s %s:%-6s pid %s\n' "pg-ha-$n" "$state" "$r" "$HOST" "${PORT[$n]}" "$pid"
  done
  return $rc
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) echo "export SUNDIAL_TEST_PG_HA_DSN='postgres://sundial:sundial@$HOST:${PORT[a]},$HOST:${PORT[b]}/sundial?target_session_attrs=read-write&sslmode=disable'" ;;
  primary) n=$(running_primary) || die "no primary is running"; echo "${PORT[$n]}" ;;
  kill-primary) cmd_kill_primary ;;
  promote) cmd_promote ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
