# Sourced by the cluster scripts whose nodes are JVM processes they start
# and stop themselves (kafka.sh, zookeeper.sh); not a cluster script (the
# profile runs *.sh). The sourcing script defines D (its data folder),
# STOP_TIMEOUT, log, is_running N and pid_of N.

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
