# Sourced by the cluster scripts whose nodes are JVM processes they start
# and stop themselves (kafka.sh, zookeeper.sh); not a cluster script (the
# profile runs *.sh). The sourcing script sources ../host.bash and defines
# D (its data folder: node N's pid file is $D/N/pid), CONF, NODES,
# READY_TIMEOUT, STOP_TIMEOUT, log, die, start_node N and cmd_status.

pid_of() { [ -s "$D/$1/pid" ] && tr -dc '0-9' <"$D/$1/pid"; return 0; }

# is_running N: the pid file names a live JVM that is this node (pids get
# reused): its command line holds the node's $D/N/conf/$CONF.
is_running() {
  local pid cmd
  pid=$(pid_of "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmd == *"$D/$1/conf/$CONF"* ]]
}

# alive PID: the process exists and has not exited. A dead node's zombie
# waits for PID 1 to reap it, which here takes about a second: not alive.
alive() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "${st%% *}" != Z ]
}

stop_node() { # N SIGNAL: signal node N, wait (escalating to SIGKILL) until it is gone
  local n=$1 sig=$2 pid deadline
  is_running "$n" || { rm -f "$D/$n/pid"; return 0; }
  pid=$(pid_of "$n")
  kill -"$sig" "$pid" 2>/dev/null || true
  deadline=$((SECONDS + STOP_TIMEOUT))
  while alive "$pid"; do
    if [ "$SECONDS" -ge "$deadline" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
    sleep 0.02
  done
  rm -f "$D/$n/pid"
  log "node $n stopped (was pid $pid, SIG$sig)"
}

# up_nodes READY LOG POLL WHAT: under the script's lock, start the nodes that
# are not running and wait, every POLL seconds, until the function READY
# succeeds. A node that exits while starting ends it with the tail of its
# logs/LOG; READY failing for READY_TIMEOUT seconds ends it with "WHAT after
# Ns" and the status. The nodes it started are left in STARTED.
up_nodes() {
  local ready=$1 logf=$2 poll=$3 what=$4 n t0=$SECONDS
  STARTED=()
  mkdir -p "$D"
  hold_lock "$D/.lock" 300
  for n in "${NODES[@]}"; do
    if is_running "$n"; then continue; fi
    start_node "$n"
    STARTED+=("$n")
  done
  while ! "$ready"; do
    for n in "${NODES[@]}"; do
      if ! is_running "$n" && [ $((SECONDS - t0)) -ge 5 ]; then
        tail -n 20 "$D/$n/logs/$logf" >&2 2>/dev/null || true
        die "node $n exited while starting (logs: $D/$n/logs/)"
      fi
    done
    if [ $((SECONDS - t0)) -ge "$READY_TIMEOUT" ]; then
      cmd_status >&2 || true
      die "$what after ${READY_TIMEOUT}s (logs: $D/N/logs/)"
    fi
    sleep "$poll"
  done
}

# down_nodes: under the script's lock, stop every node. All at once: the last
# member of a lost quorum would otherwise wait out its controlled shutdown
# alone.
down_nodes() {
  [ -d "$D" ] || return 0
  hold_lock "$D/.lock" 300
  local n
  for n in "${NODES[@]}"; do stop_node "$n" TERM & done
  wait
}
