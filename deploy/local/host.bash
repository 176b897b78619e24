# What the local scripts need of this machine, in one copy: the JDK the JVM
# components run on, a TCP probe on loopback, and the lock that keeps two
# runs of a script apart. Sourced by infra.sh, platform.sh and
# cluster/*.sh; not a script of its own (.bash: the cluster profile runs
# cluster/*.sh). The sourcing script defines die, and HOST if it probes ports.

# find_java17: the java binary of Debian's OpenJDK 17, or $SUNDIAL_JAVA.
# Only 17: Cassandra 5.0 runs on Java 11 or 17, never newer, and the
# ZooKeeper and Kafka nodes run on the same JVM.
find_java17() {
  local j
  if [ -n "${SUNDIAL_JAVA:-}" ]; then echo "$SUNDIAL_JAVA"; return 0; fi
  for j in /usr/lib/jvm/java-17-openjdk-*/bin/java; do
    if [ -x "$j" ]; then echo "$j"; return 0; fi
  done
  return 1
}

# port_open PORT: something accepts TCP connections on $HOST:PORT.
port_open() {
  timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

# hold_lock FILE SECONDS: an exclusive flock on FILE, waited for at most
# SECONDS, held on fd 9 until the script exits. Every process the script
# leaves running must be started with 9>&-: one that inherits fd 9 holds the
# lock for its whole life, and the script's next run waits on it. For the
# same reason infra.sh, which holds its own lock on fd 9, runs the cluster
# scripts with fd 9 closed.
hold_lock() {
  exec 9>"$1"
  flock -w "$2" 9 || die "another ${0##*/} has held $1 for $2 s"
}
