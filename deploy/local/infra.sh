#!/usr/bin/env bash
# shellcheck disable=SC2016 # the single-quoted bash -c scripts expand their own parameters
# Sundial's local infrastructure without Docker: PostgreSQL 15, Redis 7,
# ZooKeeper 3.9, Kafka 3.9 (KRaft) and Cassandra 5.0, on 127.0.0.1 only.
#
#   infra.sh up          install what is missing, start what is not running, wait until each answers;
#                        the five side by side, without the cassandra-secure node (below)
#   SECURE_CASSANDRA=1 infra.sh up   the same plus cassandra-secure, a second Cassandra node
#                        that only the secure-mode tests use (make test asks for it)
#   infra.sh down        stop exactly the processes `up` started, wait until they are gone
#   infra.sh stop C      stop component C only; infra.sh start C starts it again on the ports it had
#   infra.sh status      one line per component: up/starting/down, address, pid
#   infra.sh env         export lines for tests and services (source <(infra.sh env))
#   infra.sh logs C [-f] the log of component C (postgres, redis, zookeeper, kafka, cassandra)
#   infra.sh cli C [..]  a client on component C: psql, redis-cli, zkCli, broker API versions, nodetool
#   infra.sh kafka-topics list | create T [PARTITIONS] | describe T | read T [MAX]
#                        Kafka topics: a job's Kafka target topic must exist before the job is created
#   infra.sh reset       down, then delete the data (keeps downloaded jars)
#   CLUSTER=1 infra.sh up|down|status|env   the same, plus the cluster profile: every
#                        deploy/local/cluster/*.sh (ZooKeeper ensemble, Postgres standby, Cassandra ring, ...);
#                        CLUSTER=redis,zookeeper names some of them (down stops them all)
#
# Everything it makes (jars, data, logs, pid files) lives under .infra/ at the
# repository root (override with SUNDIAL_INFRA_DIR). The JVM components are
# resolved from Maven Central by the small pom.xml beside their configuration in
# deploy/local/<component>/ and cached in ~/.m2. Ports (defaults in brackets):
#   SUNDIAL_PG_PORT [5432]  SUNDIAL_REDIS_PORT [6379]  SUNDIAL_ZK_PORT [2181]
#   SUNDIAL_KAFKA_PORT [9092]  SUNDIAL_KAFKA_CONTROLLER_PORT [9093]
#   SUNDIAL_CASSANDRA_PORT [9042]  SUNDIAL_CASSANDRA_STORAGE_PORT [7000]
#   SUNDIAL_CASSANDRA_JMX_PORT [7199]
# and the secure listeners beside them (docs/operations.md, "Secure listeners"),
# by default the open ones' ports plus 1 (Redis, ZooKeeper, Cassandra's CQL) or 2
# (Kafka, Cassandra's storage and JMX), so a second instance moved by the variables
# above moves them too:
#   SUNDIAL_REDIS_TLS_PORT [6380]  SUNDIAL_ZK_TLS_PORT [2182]  SUNDIAL_KAFKA_SASL_PORT [9094]
#   SUNDIAL_CASSANDRA_SECURE_PORT [9043]  SUNDIAL_CASSANDRA_SECURE_STORAGE_PORT [7002]
#   SUNDIAL_CASSANDRA_SECURE_JMX_PORT [7201]
# (Postgres serves TLS on its own port.) A running component keeps the ports it was
# started with (recorded in .infra/<component>/ports), and `env`/`status` report those.
# See docs/operations.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SRC=$ROOT/deploy/local
INFRA=${SUNDIAL_INFRA_DIR:-$ROOT/.infra}
HOST=127.0.0.1
# cassandra-secure: a second, small Cassandra node with PasswordAuthenticator and
# client TLS required, for the secure-mode tests (authentication in Cassandra
# applies to every client of a node, so it cannot sit beside the open one).
# Every command knows all six; `up` starts cassandra-secure only when asked
# (secure_cassandra_wanted): a second Cassandra JVM booting beside the first
# takes the two cores of a small machine for one test's sake.
COMPONENTS=(postgres redis zookeeper kafka cassandra cassandra-secure)
PG_VERSION=15
PGBIN=/usr/lib/postgresql/$PG_VERSION/bin
MVN_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.6.1

# Readiness budgets in seconds. Cassandra's first boot on a busy 2-core box is the slowest.
declare -A READY_TIMEOUT=([postgres]=60 [redis]=30 [zookeeper]=60 [kafka]=120 [cassandra]=300 [cassandra-secure]=300)
# Graceful-stop budgets before SIGKILL.
declare -A STOP_TIMEOUT=([postgres]=30 [redis]=15 [zookeeper]=15 [kafka]=45 [cassandra]=60 [cassandra-secure]=60)

# The secure modes' local credentials (loopback only, throwaway data): users the
# script creates in each component, printed by `env` for the secure-mode tests.
SECURE_USER=sundial_secure
SECURE_PASSWORD=sundial-secure-local
# The secure Cassandra node's default superuser (PasswordAuthenticator creates it).
CASSANDRA_SECURE_USER=cassandra
CASSANDRA_SECURE_PASSWORD=cassandra
# Bumped when a component's secure configuration changes: `up` restarts a running
# component whose recorded stamp differs (it was started by an older infra.sh).
SECURE_STAMP=1

log() { printf '[infra] %s\n' "$*" >&2; }
die() { printf '[infra] error: %s\n' "$*" >&2; exit 1; }
# find_java17, port_open, hold_lock:
# shellcheck source-path=SCRIPTDIR source=host.bash
source "$SRC/host.bash"

# ---------------------------------------------------------------- ports

default_port() { # component key
  case $1:$2 in
    postgres:port) echo "${SUNDIAL_PG_PORT:-5432}" ;;
    redis:port) echo "${SUNDIAL_REDIS_PORT:-6379}" ;;
    redis:tls) echo "${SUNDIAL_REDIS_TLS_PORT:-$(($(default_port redis port) + 1))}" ;;
    zookeeper:port) echo "${SUNDIAL_ZK_PORT:-2181}" ;;
    zookeeper:tls) echo "${SUNDIAL_ZK_TLS_PORT:-$(($(default_port zookeeper port) + 1))}" ;;
    kafka:port) echo "${SUNDIAL_KAFKA_PORT:-9092}" ;;
    kafka:controller) echo "${SUNDIAL_KAFKA_CONTROLLER_PORT:-9093}" ;;
    kafka:sasl) echo "${SUNDIAL_KAFKA_SASL_PORT:-$(($(default_port kafka port) + 2))}" ;;
    cassandra:port) echo "${SUNDIAL_CASSANDRA_PORT:-9042}" ;;
    cassandra:storage) echo "${SUNDIAL_CASSANDRA_STORAGE_PORT:-7000}" ;;
    cassandra:jmx) echo "${SUNDIAL_CASSANDRA_JMX_PORT:-7199}" ;;
    cassandra-secure:port) echo "${SUNDIAL_CASSANDRA_SECURE_PORT:-$(($(default_port cassandra port) + 1))}" ;;
    cassandra-secure:storage) echo "${SUNDIAL_CASSANDRA_SECURE_STORAGE_PORT:-$(($(default_port cassandra storage) + 2))}" ;;
    cassandra-secure:jmx) echo "${SUNDIAL_CASSANDRA_SECURE_JMX_PORT:-$(($(default_port cassandra jmx) + 2))}" ;;
    *) die "no port $2 for $1" ;;
  esac
}

# port C KEY: the port a running component was started with, else the configured one.
port() {
  local f=$INFRA/$1/ports v
  if [ -f "$f" ] && is_running "$1"; then
    v=$(sed -n "s/^$2=//p" "$f")
    if [ -n "$v" ]; then echo "$v"; return; fi
  fi
  default_port "$1" "$2"
}

record_ports() { # component keys...
  local c=$1; shift
  local k
  : >"$INFRA/$c/ports"
  for k in "$@"; do echo "$k=$(default_port "$c" "$k")" >>"$INFRA/$c/ports"; done
  echo "secure=$SECURE_STAMP" >>"$INFRA/$c/ports"
}

# stale_config C: C runs, but was started by an older infra.sh (without the
# secure listeners this one configures), so `up` restarts it.
stale_config() {
  [ "$(sed -n 's/^secure=//p' "$INFRA/$1/ports" 2>/dev/null)" != "$SECURE_STAMP" ]
}

require_free() { # component port...
  local c=$1 p; shift
  for p in "$@"; do
    if port_open "$p"; then
      die "$c: port $HOST:$p is already taken by a process this checkout did not start (another checkout's infra? stop it with its own 'infra.sh down'; or pick other ports, see docs/operations.md)"
    fi
  done
}

# ---------------------------------------------------------------- processes

pid_of() { # component -> pid from its pid file, or nothing
  local f
  case $1 in
    postgres) f=$INFRA/postgres/data/postmaster.pid ;;
    *) f=$INFRA/$1/pid ;;
  esac
  [ -s "$f" ] && head -n1 "$f" | tr -dc '0-9'
  return 0
}

# is_running C: the pid file names a live process that is really this checkout's
# component (pids get reused, so look at what the process is).
is_running() {
  local pid cmd exe
  pid=$(pid_of "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  case $1 in
    redis) # redis rewrites its process title, so look at the executable
      exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
      exe=${exe% (deleted)} # the package was upgraded under the running server
      [[ $exe == */redis-server || $exe == */redis-check-rdb ]] ;;
    *) [[ $cmd == *"$INFRA/$1/"* ]] ;;
  esac
}

descendants() { # pid -> all descendant pids (postgres backends, ...)
  local p
  for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    echo "$p"
    descendants "$p"
  done
}

# launch C CMD...: start CMD detached from this shell's session, writing its pid
# to the component's pid file (the process execs in place, so the pid is the JVM's).
# Servers never inherit fd 9, the lock `up` and `down` hold: a daemon keeping it
# open would make the next `down` wait forever.
launch() {
  local c=$1; shift
  rm -f "$INFRA/$c/pid"
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$INFRA/$c/pid" "$@" \
    >>"$INFRA/$c/logs/stdout.log" 2>&1 </dev/null 9>&- &
  disown || true
}

# ---------------------------------------------------------------- installation

APT_UPDATED=
apt_install() { # packages...
  export DEBIAN_FRONTEND=noninteractive
  local policy=/usr/sbin/policy-rc.d made_policy=
  # Debian's postinst scripts start the packaged services (a default postgres
  # cluster on 5432, redis on 6379), which would take our ports. policy-rc.d
  # exit 101 tells invoke-rc.d not to start anything during this install.
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
  fi
  if [ -z "$APT_UPDATED" ]; then
    log "apt-get update"
    apt-get update -qq >/dev/null || { [ -n "$made_policy" ] && rm -f "$policy"; die "apt-get update failed"; }
    APT_UPDATED=1
  fi
  log "apt-get install $*"
  if ! apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confold "$@" >"$INFRA/apt.log" 2>&1; then
    [ -n "$made_policy" ] && rm -f "$policy"
    tail -n 30 "$INFRA/apt.log" >&2
    die "apt-get install $* failed (full output in $INFRA/apt.log)"
  fi
  [ -n "$made_policy" ] && rm -f "$policy"
  return 0
}

ensure_packages() {
  [ "$(id -u)" = 0 ] || die "run as root: it installs Debian packages and runs PostgreSQL as the postgres user"
  local need=()
  [ -x "$PGBIN/postgres" ] || need+=("postgresql-$PG_VERSION")
  command -v psql >/dev/null || need+=("postgresql-client-$PG_VERSION")
  # pg_trgm (migration 00010's name-search index): Debian ships contrib in the server package;
  # postgresql-contrib, its meta package, brings it back to an image that trimmed it.
  [ -f "/usr/share/postgresql/$PG_VERSION/extension/pg_trgm.control" ] || need+=(postgresql-contrib)
  command -v redis-server >/dev/null || need+=(redis-server)
  command -v redis-cli >/dev/null || need+=(redis-tools)
  find_java17 >/dev/null || need+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || need+=(maven)
  command -v setsid >/dev/null && command -v flock >/dev/null && command -v runuser >/dev/null || need+=(util-linux)
  command -v ps >/dev/null || need+=(procps)
  command -v openssl >/dev/null || need+=(openssl)
  if [ ${#need[@]} -gt 0 ]; then apt_install "${need[@]}"; fi
  JAVA=$(find_java17) || die "no OpenJDK 17 found under /usr/lib/jvm (set SUNDIAL_JAVA to a Java 17 binary)"
  JAVA_HOME_17=$(dirname "$(dirname "$(readlink -f "$JAVA")")")
  "$JAVA" -version 2>&1 | grep -q 'version "17\.' || die "$JAVA is not Java 17 (Cassandra 5.0 needs 11 or 17)"
  id postgres >/dev/null 2>&1 || die "the postgres user is missing; reinstall postgresql-common"
}

# fetch C [SUB]: resolve the component's runtime jars into .infra/C/lib (with SUB, those of
# deploy/local/C/SUB/pom.xml into .infra/C/SUB-lib), once per pom.xml content.
fetch() {
  local c=$1 sub=${2:-}
  local pom=$SRC/$c/${sub:+$sub/}pom.xml lib=$INFRA/$c/${sub:+$sub-}lib want
  want=$(sha256sum "$pom" | cut -d' ' -f1)
  if [ -d "$lib" ] && [ "$(cat "$lib.sha256" 2>/dev/null)" = "$want" ]; then return 0; fi
  log "$c: resolving jars from Maven Central (cached in ~/.m2)"
  rm -rf "$lib.tmp"
  if ! JAVA_HOME=$JAVA_HOME_17 mvn -B -q --no-transfer-progress -f "$pom" \
      "$MVN_PLUGIN:copy-dependencies" -DincludeScope=runtime -DoutputDirectory="$lib.tmp" \
      >"$INFRA/$c/logs/mvn.log" 2>&1; then
    tail -n 30 "$INFRA/$c/logs/mvn.log" >&2
    die "$c: mvn could not resolve $pom (full output in $INFRA/$c/logs/mvn.log)"
  fi
  rm -rf "$lib" && mv "$lib.tmp" "$lib" && echo "$want" >"$lib.sha256"
}

# render SRC DST KEY=VALUE...: copy a config template, filling in @@KEY@@.
render() {
  local src=$1 dst=$2 kv expr=()
  shift 2
  for kv in "$@"; do expr+=(-e "s#@@${kv%%=*}@@#${kv#*=}#g"); done
  sed "${expr[@]}" "$src" >"$dst"
}

# ensure_certs: a local CA and one server certificate (127.0.0.1, localhost) that
# every component's secure listener serves, made once under .infra/tls/ and kept
# across restarts (ten years; `infra.sh reset` keeps them too, rm -rf .infra/tls
# makes new ones, then restart every component). Tests trust ca.crt
# (SUNDIAL_TEST_SECURE_CA_FILE); server.pem is the key and certificate in one PEM
# file, the form the JVM components read as a keystore.
ensure_certs() {
  local t=$INFRA/tls
  if [ -s "$t/ca.crt" ] && [ -s "$t/server.pem" ] && [ -s "$t/server.crt" ] && [ -s "$t/server.key" ]; then return 0; fi
  log "tls: making a local CA and a server certificate in $t"
  rm -rf "$t.tmp" && mkdir -p "$t.tmp" && chmod 755 "$t.tmp"
  {
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=Sundial local CA" \
      -keyout "$t.tmp/ca.key" -out "$t.tmp/ca.crt" \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign &&
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$t.tmp/server.key" -out "$t.tmp/server.csr" &&
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' >"$t.tmp/server.ext" &&
    openssl x509 -req -in "$t.tmp/server.csr" -CA "$t.tmp/ca.crt" -CAkey "$t.tmp/ca.key" -CAcreateserial \
      -days 3650 -extfile "$t.tmp/server.ext" -out "$t.tmp/server.crt"
  } >"$INFRA/tls.log" 2>&1 || { tail -n 20 "$INFRA/tls.log" >&2; die "tls: openssl could not make the local certificates (full output in $INFRA/tls.log)"; }
  cat "$t.tmp/server.key" "$t.tmp/server.crt" >"$t.tmp/server.pem"
  rm -f "$t.tmp/server.csr" "$t.tmp/server.ext" "$t.tmp/ca.srl"
  # The JVMs and redis run as root; postgres gets its own copy of the key (start_postgres).
  chmod 600 "$t.tmp/ca.key" "$t.tmp/server.key" "$t.tmp/server.pem"
  chmod 644 "$t.tmp/ca.crt" "$t.tmp/server.crt"
  rm -rf "$t" && mv "$t.tmp" "$t"
}

# ---------------------------------------------------------------- components: start

start_postgres() {
  local d=$INFRA/postgres p
  p=$(port postgres port)
  require_free postgres "$p"
  mkdir -p "$d/logs" "$d/run"
  chown postgres: "$d/logs" "$d/run"
  # postgres refuses to run as root, so the cluster belongs to the postgres
  # user, which must be able to walk down to it (a mktemp -d checkout is 0700).
  if ! runuser -u postgres -- test -x "$d"; then
    local dir=$d ancestors=()
    while [ "$dir" != / ]; do ancestors=("$dir" "${ancestors[@]}"); dir=$(dirname "$dir"); done
    for dir in "${ancestors[@]}"; do # top down, so each test sees its parents already fixed
      if ! runuser -u postgres -- test -x "$dir"; then
        log "postgres: adding o+x (search only) to $dir so the postgres user can reach its cluster"
        chmod o+x "$dir"
      fi
    done
  fi
  if [ ! -f "$d/data/PG_VERSION" ]; then
    log "postgres: initdb $d/data (superuser sundial, password sundial)"
    rm -rf "$d/data" && mkdir -p "$d/data" && chown postgres: "$d/data" && chmod 700 "$d/data"
    printf 'sundial\n' >"$d/run/pwfile" && chown postgres: "$d/run/pwfile" && chmod 600 "$d/run/pwfile"
    runuser -u postgres -- "$PGBIN/initdb" -D "$d/data" --username=sundial --pwfile="$d/run/pwfile" \
      --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C \
      >"$d/logs/initdb.log" 2>&1 || { rm -f "$d/run/pwfile"; tail -n 20 "$d/logs/initdb.log" >&2; die "postgres: initdb failed"; }
    rm -f "$d/run/pwfile"
    echo "include_if_exists = 'sundial.conf'" >>"$d/data/postgresql.conf"
  fi
  render "$SRC/postgres/postgresql.conf" "$d/data/sundial.conf" PORT="$p" RUN="$d/run"
  render "$SRC/postgres/pg_hba.conf" "$d/run/pg_hba.conf" SECURE_USER="$SECURE_USER"
  # postgres wants its key private to it.
  install -o postgres -g postgres -m 600 "$INFRA/tls/server.key" "$d/run/server.key"
  install -o postgres -g postgres -m 644 "$INFRA/tls/server.crt" "$d/run/server.crt"
  chown postgres: "$d/data/sundial.conf" "$d/run/pg_hba.conf"
  record_ports postgres port
  # -W: return at once; readiness is checked below like every other component.
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$d/data" -l "$d/logs/postgres.log" -W -s start \
    >>"$d/logs/stdout.log" 2>&1 </dev/null 9>&- || die "postgres: pg_ctl start failed (see $d/logs/postgres.log)"
}

start_redis() {
  local d=$INFRA/redis p tp
  p=$(port redis port)
  require_free redis "$p"
  mkdir -p "$d/conf" "$d/data" "$d/logs"
  tp=$(port redis tls)
  require_free redis "$tp"
  render "$SRC/redis/redis.conf" "$d/conf/redis.conf" PORT="$p" PIDFILE="$d/pid" LOGS="$d/logs" DATA="$d/data" \
    TLS_PORT="$tp" TLS="$INFRA/tls" SECURE_USER="$SECURE_USER" SECURE_PASSWORD="$SECURE_PASSWORD"
  record_ports redis port tls
  rm -f "$d/pid"
  redis-server "$d/conf/redis.conf" >>"$d/logs/stdout.log" 2>&1 </dev/null 9>&- || die "redis: redis-server failed to start (see $d/logs/redis.log)"
}

start_zookeeper() {
  local d=$INFRA/zookeeper p tp
  p=$(port zookeeper port)
  require_free zookeeper "$p"
  mkdir -p "$d/conf" "$d/data" "$d/logs"
  fetch zookeeper
  tp=$(port zookeeper tls)
  require_free zookeeper "$tp"
  render "$SRC/zookeeper/zoo.cfg" "$d/conf/zoo.cfg" PORT="$p" DATA="$d/data" TLS_PORT="$tp" TLS="$INFRA/tls"
  render "$SRC/zookeeper/logback.xml" "$d/conf/logback.xml" LOGS="$d/logs"
  record_ports zookeeper port tls
  launch zookeeper "$JAVA" -Xms32m -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss512k \
    -Djava.awt.headless=true -Dzookeeper.jmx.log4j.disable=true \
    -Dlogback.configurationFile="$d/conf/logback.xml" \
    -cp "$d/lib/*" org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/conf/zoo.cfg"
}

start_kafka() {
  local d=$INFRA/kafka p cp sp id
  p=$(port kafka port)
  cp=$(port kafka controller)
  sp=$(port kafka sasl)
  require_free kafka "$p" "$cp" "$sp"
  mkdir -p "$d/conf" "$d/data" "$d/logs"
  fetch kafka
  render "$SRC/kafka/server.properties" "$d/conf/server.properties" PORT="$p" CONTROLLER_PORT="$cp" DATA="$d/data" \
    SASL_PORT="$sp" TLS="$INFRA/tls"
  render "$SRC/kafka/log4j.properties" "$d/conf/log4j.properties" LOGS="$d/logs"
  record_ports kafka port controller sasl
  local klog=(-Dlog4j.configuration="file:$d/conf/log4j.properties" -Dkafka.logs.dir="$d/logs")
  if [ ! -f "$d/data/meta.properties" ]; then
    # A KRaft log directory is formatted once with a cluster id: 16 random bytes, URL-safe base64 without padding.
    # Passed as --cluster-id=…: one id in 64 starts with "-", which the tool's parser would take for an option.
    id=$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    log "kafka: formatting $d/data (cluster id $id)"
    "$JAVA" -Xmx256m "${klog[@]}" -cp "$d/lib/*" kafka.tools.StorageTool format --ignore-formatted \
      --cluster-id="$id" -c "$d/conf/server.properties" --add-scram "$(kafka_scram_user)" >"$d/logs/format.log" 2>&1 \
      || { tail -n 20 "$d/logs/format.log" >&2; die "kafka: storage format failed"; }
    echo "$SECURE_USER" >"$d/data/.scram-users"
  fi
  launch kafka "$JAVA" -Xms256m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -Djava.awt.headless=true "${klog[@]}" \
    -cp "$d/lib/*" kafka.Kafka "$d/conf/server.properties"
}

start_cassandra() {
  local d=$INFRA/cassandra p sp jp jamm
  p=$(port cassandra port)
  sp=$(port cassandra storage)
  jp=$(port cassandra jmx)
  require_free cassandra "$p" "$sp" "$jp"
  mkdir -p "$d/conf" "$d/data" "$d/logs"
  fetch cassandra
  render "$SRC/cassandra/cassandra.yaml" "$d/conf/cassandra.yaml" PORT="$p" STORAGE_PORT="$sp" DATA="$d/data"
  render "$SRC/cassandra/logback.xml" "$d/conf/logback.xml" LOGS="$d/logs"
  cp "$SRC/cassandra/jvm17.args" "$d/conf/jvm17.args"
  record_ports cassandra port storage jmx
  jamm=$(ls "$d/lib"/jamm-*.jar 2>/dev/null | head -n1)
  [ -n "$jamm" ] || die "cassandra: no jamm jar in $d/lib"
  launch cassandra "$JAVA" @"$d/conf/jvm17.args" -javaagent:"$jamm" \
    -Dcassandra.config="file://$d/conf/cassandra.yaml" \
    -Dcassandra.storagedir="$d/data" -Dcassandra.logdir="$d/logs" \
    -Dcassandra.jmx.local.port="$jp" \
    -Dlogback.configurationFile="$d/conf/logback.xml" \
    -cp "$d/conf:$d/lib/*" org.apache.cassandra.service.CassandraDaemon
}

# kafka_scram_user: the SASL_SSL listener's user, as StorageTool --add-scram and
# kafka-configs --add-config take it.
kafka_scram_user() {
  printf 'SCRAM-SHA-512=[name=%s,password=%s]' "$SECURE_USER" "$SECURE_PASSWORD"
}

# cassandra-secure: the same jars and settings as cassandra, on ports of its own,
# with PasswordAuthenticator, client TLS required and a smaller heap.
start_cassandra-secure() {
  local d=$INFRA/cassandra-secure p sp jp jamm
  p=$(port cassandra-secure port)
  sp=$(port cassandra-secure storage)
  jp=$(port cassandra-secure jmx)
  require_free cassandra-secure "$p" "$sp" "$jp"
  mkdir -p "$d/conf" "$d/data" "$d/logs" "$INFRA/cassandra/logs"
  fetch cassandra
  # Its own name for the jars, so is_running tells the two nodes apart by command line.
  ln -sfn "$INFRA/cassandra/lib" "$d/lib"
  render "$SRC/cassandra/cassandra.yaml" "$d/conf/cassandra.yaml" PORT="$p" STORAGE_PORT="$sp" DATA="$d/data"
  sed -i "s/^cluster_name: .*/cluster_name: 'sundial-local-secure'/" "$d/conf/cassandra.yaml"
  # Its memtables an eighth of its smaller heap, as the open node's are of its own.
  sed -i "s/^memtable_heap_space: .*/memtable_heap_space: 64MiB/" "$d/conf/cassandra.yaml"
  render "$SRC/cassandra/secure.yaml" "$d/conf/secure.yaml" TLS="$INFRA/tls"
  cat "$d/conf/secure.yaml" >>"$d/conf/cassandra.yaml"
  render "$SRC/cassandra/logback.xml" "$d/conf/logback.xml" LOGS="$d/logs"
  cp "$SRC/cassandra/jvm17.args" "$d/conf/jvm17.args"
  record_ports cassandra-secure port storage jmx
  jamm=$(ls "$d/lib"/jamm-*.jar 2>/dev/null | head -n1)
  [ -n "$jamm" ] || die "cassandra-secure: no jamm jar in $d/lib"
  # superuser_setup_delay_ms=0: the default role exists as soon as the node serves
  # (10 s later by default).
  launch cassandra-secure "$JAVA" @"$d/conf/jvm17.args" -Xms512m -Xmx512m -javaagent:"$jamm" \
    -Dcassandra.config="file://$d/conf/cassandra.yaml" \
    -Dcassandra.storagedir="$d/data" -Dcassandra.logdir="$d/logs" \
    -Dcassandra.jmx.local.port="$jp" -Dcassandra.superuser_setup_delay_ms=0 \
    -Dlogback.configurationFile="$d/conf/logback.xml" \
    -cp "$d/conf:$d/lib/*" org.apache.cassandra.service.CassandraDaemon
}

# ---------------------------------------------------------------- components: readiness

# Each check speaks the component's own protocol: an open port alone is not ready.
ready_postgres() {
  local p
  p=$(port postgres port)
  "$PGBIN/pg_isready" -q -h "$HOST" -p "$p" -t 2 || return 1
  PGPASSWORD=sundial PGCONNECT_TIMEOUT=3 psql -h "$HOST" -p "$p" -U sundial -d postgres -XtAqc 'select 1' 2>/dev/null | grep -qx 1
}

ready_redis() {
  [ "$(timeout 3 redis-cli -h "$HOST" -p "$(port redis port)" ping 2>/dev/null)" = PONG ] &&
    [ "$(timeout 3 redis-cli -h "$HOST" -p "$(port redis tls)" --tls --cacert "$INFRA/tls/ca.crt" \
      --user "$SECURE_USER" --pass "$SECURE_PASSWORD" --no-auth-warning ping 2>/dev/null)" = PONG ]
}

# ZooKeeper four-letter words: ruok -> imok, and srvr reports a serving mode.
zk_4lw() { # word
  timeout 3 bash -c 'exec 3<>/dev/tcp/$0/$1 && printf %s "$2" >&3 && cat <&3' "$HOST" "$(port zookeeper port)" "$1" 2>/dev/null
}
ready_zookeeper() {
  [ "$(zk_4lw ruok)" = imok ] && zk_4lw srvr | grep -q '^Mode: ' && port_open "$(port zookeeper tls)"
}

# Kafka: a Metadata v0 request (api key 3) must come back listing at least one
# live broker, which a KRaft broker only does once it is registered and unfenced.
ready_kafka() {
  local out
  out=$(timeout 3 bash -c 'exec 3<>/dev/tcp/$0/$1 || exit 1
    # size=14 | api_key=3 api_version=0 correlation_id=7 client_id="" topics=[] (all)
    printf "\x00\x00\x00\x0e\x00\x03\x00\x00\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00" >&3
    head -c 12 <&3 | od -An -tx1' "$HOST" "$(port kafka port)" 2>/dev/null | tr -d ' \n') || return 1
  # bytes 4-7 correlation id 7, bytes 8-11 number of brokers (> 0)
  [[ $out == ????????00000007* ]] && [ ${#out} -eq 24 ] && [ "${out:16:8}" != 00000000 ] &&
    port_open "$(port kafka sasl)"
}

# Cassandra: the native transport must answer a protocol v4 STARTUP with READY
# (opcode 2). Port 9042 opens only at the end of startup, but this proves it serves.
ready_cassandra() {
  local out
  out=$(timeout 3 bash -c 'exec 3<>/dev/tcp/$0/$1 || exit 1
    # v4 request, stream 1, opcode STARTUP, body {"CQL_VERSION": "3.0.0"} (22 bytes)
    printf "\x04\x00\x00\x01\x01\x00\x00\x00\x16\x00\x01\x00\x0bCQL_VERSION\x00\x053.0.0" >&3
    head -c 9 <&3 | od -An -tx1' "$HOST" "$(port cassandra port)" 2>/dev/null | tr -d ' \n') || return 1
  [[ $out == 8400000102* ]]
}

# cassandra-secure: over TLS (trusting the local CA), STARTUP must be answered
# with AUTHENTICATE and then the default superuser's AUTH_RESPONSE with
# AUTH_SUCCESS (opcode 0x10): the node serves TLS and its role exists.
ready_cassandra-secure() {
  local out tok=$'\x01'$CASSANDRA_SECURE_USER$'\x01'$CASSANDRA_SECURE_PASSWORD
  out=$( { printf "\x04\x00\x00\x01\x01\x00\x00\x00\x16\x00\x01\x00\x0bCQL_VERSION\x00\x053.0.0"
      # The node drops a request sent before it answered STARTUP: wait for the answer.
      sleep 0.5
      # v4 request, stream 2, opcode AUTH_RESPONSE, body [bytes] "\0user\0password"
      printf "\x04\x00\x00\x02\x0f\x00\x00\x00\x$(printf %02x $((${#tok} + 4)))\x00\x00\x00\x$(printf %02x ${#tok})"
      printf '%s' "$tok" | tr '\001' '\000'
      sleep 1.5; } | timeout 5 openssl s_client -quiet -connect "$HOST:$(port cassandra-secure port)" \
      -CAfile "$INFRA/tls/ca.crt" -verify_return_error 2>/dev/null | od -An -tx1 | tr -d ' \n') || true
  [[ $out == *8400000210* ]]
}

log_file() { # component -> its main log
  case $1 in
    postgres) echo "$INFRA/postgres/logs/postgres.log" ;;
    redis) echo "$INFRA/redis/logs/redis.log" ;;
    zookeeper) echo "$INFRA/zookeeper/logs/zookeeper.log" ;;
    kafka) echo "$INFRA/kafka/logs/server.log" ;;
    cassandra) echo "$INFRA/cassandra/logs/system.log" ;;
    cassandra-secure) echo "$INFRA/cassandra-secure/logs/system.log" ;;
  esac
}

show_failure() { # component
  local f
  for f in "$(log_file "$1")" "$INFRA/$1/logs/stdout.log"; do
    if [ -s "$f" ]; then
      printf '[infra] --- last lines of %s ---\n' "$f" >&2
      tail -n 25 "$f" >&2
    fi
  done
}

wait_ready() { # component
  local c=$1 start=$SECONDS deadline=$((SECONDS + READY_TIMEOUT[$1]))
  while ! "ready_$c"; do
    # pid files appear a moment after the launch; give them a few seconds.
    if ! is_running "$c" && [ $((SECONDS - start)) -ge 5 ]; then
      show_failure "$c"
      die "$c exited while starting (logs: infra.sh logs $c)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      show_failure "$c"
      die "$c did not become ready within ${READY_TIMEOUT[$c]}s (logs: infra.sh logs $c)"
    fi
    sleep 0.25
  done
}

# Postgres: the sundial database is created once, after the server is ready.
after_ready_postgres() {
  local p
  p=$(port postgres port)
  if [ -z "$(PGPASSWORD=sundial psql -h "$HOST" -p "$p" -U sundial -d postgres -XtAqc "select 1 from pg_database where datname = 'sundial'")" ]; then
    PGPASSWORD=sundial psql -h "$HOST" -p "$p" -U sundial -d postgres -XqAc 'create database sundial' >/dev/null
  fi
  PGPASSWORD=sundial psql -h "$HOST" -p "$p" -U sundial -d sundial -XtAqc 'select 1' | grep -qx 1
  # The secure-mode tests' user (pg_hba.conf: SCRAM over TLS only), allowed to
  # make schemas of its own in the sundial database.
  PGPASSWORD=sundial psql -h "$HOST" -p "$p" -U sundial -d sundial -XqA -v ON_ERROR_STOP=1 >/dev/null <<SQL
SELECT format('CREATE ROLE %I LOGIN', '$SECURE_USER') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$SECURE_USER') \\gexec
ALTER ROLE $SECURE_USER WITH LOGIN PASSWORD '$SECURE_PASSWORD';
GRANT CREATE, CONNECT ON DATABASE sundial TO $SECURE_USER;
SQL
}

# Kafka: a log directory formatted before the SASL_SSL listener existed has no
# SCRAM user yet; add it once, through the PLAINTEXT listener.
after_ready_kafka() {
  local d=$INFRA/kafka
  [ "$(cat "$d/data/.scram-users" 2>/dev/null)" = "$SECURE_USER" ] && return 0
  log "kafka: adding the SCRAM user $SECURE_USER"
  "$JAVA" -Xmx256m -Dlog4j.configuration="file:$d/conf/log4j.properties" -Dkafka.logs.dir="$d/logs" -cp "$d/lib/*" \
    kafka.admin.ConfigCommand --bootstrap-server "$HOST:$(port kafka port)" --alter --entity-type users \
    --entity-name "$SECURE_USER" --add-config "SCRAM-SHA-512=[password=$SECURE_PASSWORD]" >"$d/logs/scram.log" 2>&1 \
    || { tail -n 20 "$d/logs/scram.log" >&2; die "kafka: could not add the SCRAM user (full output in $d/logs/scram.log)"; }
  echo "$SECURE_USER" >"$d/data/.scram-users"
}

# after_ready C: what must be set up in C once it answers.
after_ready() {
  case $1 in
    postgres) after_ready_postgres ;;
    kafka) after_ready_kafka ;;
  esac
}

# ---------------------------------------------------------------- commands

# One `up` or `down` at a time per checkout (two `make` runs, say).
take_lock() { hold_lock "$INFRA/.lock" 600; }

# secure_cassandra_wanted: SECURE_CASSANDRA is set to anything but empty or 0.
secure_cassandra_wanted() {
  case ${SECURE_CASSANDRA:-0} in 0 | "") return 1 ;; esac
}

# up_components: what `up` starts and waits for, slowest first: the five,
# and cassandra-secure when asked for or already running (left alone then).
up_components() {
  echo cassandra
  if secure_cassandra_wanted || is_running cassandra-secure; then echo cassandra-secure; fi
  printf '%s\n' zookeeper kafka postgres redis
}

cmd_up() {
  mkdir -p "$INFRA"
  take_lock
  for c in "${COMPONENTS[@]}"; do mkdir -p "$INFRA/$c/logs"; done
  ensure_packages
  ensure_certs
  local t0=$SECONDS c want=() started=() jvms=() natives=() chain rc=0
  mapfile -t want < <(up_components)
  for c in "${want[@]}"; do
    if is_running "$c" && stale_config "$c"; then
      log "$c: started by an older infra.sh (no secure listener), restarting it on the same ports"
      restore_ports "$c"
      stop_one "$c"
    fi
    if is_running "$c"; then
      log "$c: already running (pid $(pid_of "$c")), left alone"
    else
      started+=("$c")
      case $c in postgres | redis) natives+=("$c") ;; *) jvms+=("$c") ;; esac
    fi
  done
  # Every component starts at once. The JVMs start one after the other in
  # the background, slowest first, each booting while the next one's jars
  # resolve (Maven 3.8's local repository is not safe for two mvn writing at
  # once, so the fetches stay in one line); Postgres and Redis start here
  # meanwhile. Then each is waited for with its own readiness check.
  (
    for c in "${jvms[@]}"; do
      log "$c: starting"
      "start_$c"
    done
  ) &
  chain=$!
  for c in "${natives[@]}"; do
    log "$c: starting"
    "start_$c"
  done
  wait "$chain" || rc=$?
  [ "$rc" = 0 ] || die "starting ${jvms[*]} failed (above)"
  for c in "${COMPONENTS[@]}"; do
    [[ " ${want[*]} " == *" $c "* ]] || continue
    wait_ready "$c"
    after_ready "$c"
    log "$c: ready on $HOST:$(port "$c" port) after $((SECONDS - t0))s"
  done
  secure_cassandra_wanted || is_running cassandra-secure ||
    log "cassandra-secure: not started (only the secure-mode tests use it: SECURE_CASSANDRA=1 infra.sh up)"
  log "all components up in $((SECONDS - t0))s (started: ${started[*]:-none})"
}

stop_one() { # component: signal it, then wait (escalating) until it and its children are gone
  local c=$1 pid kids deadline
  pid=$(pid_of "$c")
  if ! is_running "$c"; then
    [ "$c" = postgres ] || rm -f "$INFRA/$c/pid"
    return 0
  fi
  kids=$(descendants "$pid")
  # postgres: SIGINT is its "fast" shutdown (SIGTERM would wait for every client to disconnect).
  if [ "$c" = postgres ]; then kill -INT "$pid" 2>/dev/null || true; else kill -TERM "$pid" 2>/dev/null || true; fi
  deadline=$((SECONDS + STOP_TIMEOUT[$c]))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "$c: still running after ${STOP_TIMEOUT[$c]}s, sending SIGKILL"
      # postgres: SIGQUIT first makes the postmaster take its backends down with it
      if [ "$c" = postgres ]; then kill -QUIT "$pid" 2>/dev/null || true; sleep 1; fi
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
  local k
  for k in $kids; do
    if kill -0 "$k" 2>/dev/null; then kill -KILL "$k" 2>/dev/null || true; fi
  done
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  [ "$c" = postgres ] && rm -f "$INFRA/postgres/data/postmaster.pid"
  [ "$c" = postgres ] || rm -f "$INFRA/$c/pid"
  log "$c: stopped (was pid $pid)"
}

cmd_down() {
  [ -d "$INFRA" ] || { log "nothing to stop ($INFRA does not exist)"; return 0; }
  take_lock
  local c
  # Stop all at once (each waits for its own process); clients first, stores last is
  # not needed here since nothing but tests depends on them.
  for c in cassandra cassandra-secure kafka zookeeper redis postgres; do stop_one "$c" & done
  wait
  for c in "${COMPONENTS[@]}"; do
    if is_running "$c"; then die "$c is still running (pid $(pid_of "$c"))"; fi
  done
  log "all components down"
}

# restore_ports C: a component started again keeps the ports it last ran on,
# whatever this shell's SUNDIAL_*_PORT say (its clients still point there).
restore_ports() {
  local f=$INFRA/$1/ports k v var
  [ -f "$f" ] || return 0
  while IFS='=' read -r k v; do
    case $1:$k in
      postgres:port) var=SUNDIAL_PG_PORT ;;
      redis:port) var=SUNDIAL_REDIS_PORT ;;
      redis:tls) var=SUNDIAL_REDIS_TLS_PORT ;;
      zookeeper:port) var=SUNDIAL_ZK_PORT ;;
      zookeeper:tls) var=SUNDIAL_ZK_TLS_PORT ;;
      kafka:port) var=SUNDIAL_KAFKA_PORT ;;
      kafka:controller) var=SUNDIAL_KAFKA_CONTROLLER_PORT ;;
      kafka:sasl) var=SUNDIAL_KAFKA_SASL_PORT ;;
      cassandra:port) var=SUNDIAL_CASSANDRA_PORT ;;
      cassandra:storage) var=SUNDIAL_CASSANDRA_STORAGE_PORT ;;
      cassandra:jmx) var=SUNDIAL_CASSANDRA_JMX_PORT ;;
      cassandra-secure:port) var=SUNDIAL_CASSANDRA_SECURE_PORT ;;
      cassandra-secure:storage) var=SUNDIAL_CASSANDRA_SECURE_STORAGE_PORT ;;
      cassandra-secure:jmx) var=SUNDIAL_CASSANDRA_SECURE_JMX_PORT ;;
      *) continue ;;
    esac
    if [ -n "$v" ]; then export "$var=$v"; fi
  done <"$f"
}

one_component() { # name: die unless it is one of COMPONENTS
  local c
  for c in "${COMPONENTS[@]}"; do [ "$c" = "${1:-}" ] && return 0; done
  die "usage: infra.sh $2 <postgres|redis|zookeeper|kafka|cassandra|cassandra-secure>"
}

# stop C / start C: one component down and up again (fault drills: make chaos).
cmd_stop() {
  one_component "${1:-}" stop
  [ -d "$INFRA" ] || return 0
  take_lock
  stop_one "$1"
}

cmd_start() {
  one_component "${1:-}" start
  local c=$1 t0=$SECONDS
  mkdir -p "$INFRA/$c/logs"
  take_lock
  ensure_packages
  ensure_certs
  restore_ports "$c"
  if is_running "$c"; then log "$c: already running (pid $(pid_of "$c")), left alone"; else "start_$c"; fi
  wait_ready "$c"
  after_ready "$c"
  log "$c: ready on $HOST:$(port "$c" port) after $((SECONDS - t0))s"
}

cmd_status() {
  local c pid state rc=0
  for c in "${COMPONENTS[@]}"; do
    pid=$(pid_of "$c")
    if is_running "$c"; then
      if "ready_$c"; then state=up; else state=starting; rc=1; fi
    elif [ "$c" = cassandra-secure ] && ! secure_cassandra_wanted; then
      state=off; pid=- # started on request only: not a failure
    else
      state=down; pid=-; rc=1
    fi
    printf '%-16s %-8s %s:%-6s pid %s\n' "$c" "$state" "$HOST" "$(port "$c" port)" "${pid:--}"
  done
  return $rc
}

cmd_env() {
  cat <<EOF
export SUNDIAL_TEST_POSTGRES_DSN='postgres://sundial:sundial@$HOST:$(port postgres port)/sundial?sslmode=disable'
export SUNDIAL_TEST_REDIS_ADDR='$HOST:$(port redis port)'
export SUNDIAL_TEST_ZK_ADDRS='$HOST:$(port zookeeper port)'
export SUNDIAL_TEST_KAFKA_BROKERS='$HOST:$(port kafka port)'
export SUNDIAL_TEST_CASSANDRA_HOSTS='$HOST:$(port cassandra port)'
export SUNDIAL_TEST_SECURE_CA_FILE='$INFRA/tls/ca.crt'
export SUNDIAL_TEST_SECURE_POSTGRES_DSN='postgres://$SECURE_USER:$SECURE_PASSWORD@$HOST:$(port postgres port)/sundial?sslmode=verify-full&sslrootcert=$INFRA/tls/ca.crt'
export SUNDIAL_TEST_SECURE_REDIS_ADDR='$HOST:$(port redis tls)'
export SUNDIAL_TEST_SECURE_ZK_ADDRS='$HOST:$(port zookeeper tls)'
export SUNDIAL_TEST_SECURE_KAFKA_BROKERS='$HOST:$(port kafka sasl)'
export SUNDIAL_TEST_SECURE_CASSANDRA_HOSTS='$HOST:$(port cassandra-secure port)'
export SUNDIAL_TEST_SECURE_USERNAME='$SECURE_USER'
export SUNDIAL_TEST_SECURE_PASSWORD='$SECURE_PASSWORD'
export SUNDIAL_TEST_SECURE_CASSANDRA_USERNAME='$CASSANDRA_SECURE_USER'
export SUNDIAL_TEST_SECURE_CASSANDRA_PASSWORD='$CASSANDRA_SECURE_PASSWORD'
EOF
}

cmd_logs() {
  local c=${1:-} f
  [ -n "$c" ] || die "usage: infra.sh logs <postgres|redis|zookeeper|kafka|cassandra> [-f]"
  f=$(log_file "$c")
  [ -n "$f" ] || die "unknown component $c"
  [ -f "$f" ] || die "$c has no log yet ($f)"
  echo "==> $f (other logs: $(ls "$INFRA/$c/logs" | tr '\n' ' '))" >&2
  if [ "${2:-}" = -f ]; then tail -n 100 -F "$f"; else tail -n 200 "$f"; fi
}

# cli C [ARGS]: a client for troubleshooting, pointed at the running component.
cmd_cli() {
  local c=${1:-}
  shift || true
  local d=$INFRA/$c
  case $c in
    postgres) PGPASSWORD=sundial exec psql -h "$HOST" -p "$(port postgres port)" -U sundial -d sundial "$@" ;;
    redis) exec redis-cli -h "$HOST" -p "$(port redis port)" "$@" ;;
  esac
  JAVA=$(find_java17) || die "no OpenJDK 17 (run infra.sh up first)"
  [ -d "$d/lib" ] || die "$c has no jars yet (run infra.sh up first)"
  mkdir -p "$d/conf"
  # clients log warnings to the terminal, not into the server's log file
  printf '<configuration><appender name="E" class="ch.qos.logback.core.ConsoleAppender"><target>System.err</target><encoder><pattern>%%-5level %%msg%%n</pattern></encoder></appender><root level="WARN"><appender-ref ref="E"/></root></configuration>\n' >"$d/conf/logback-cli.xml"
  case $c in
    zookeeper) exec "$JAVA" -Xmx128m -Dlogback.configurationFile="$d/conf/logback-cli.xml" -cp "$d/lib/*" \
      org.apache.zookeeper.ZooKeeperMain -server "$HOST:$(port zookeeper port)" "$@" ;;
    kafka) # the broker's own tool: which API versions it answers
      exec "$JAVA" -Xmx256m -Dlog4j.configuration="file:$d/conf/log4j.properties" -Dkafka.logs.dir="$d/logs" -cp "$d/lib/*" \
      kafka.admin.BrokerApiVersionsCommand --bootstrap-server "$HOST:$(port kafka port)" "$@" ;;
    cassandra) # nodetool over JMX on 127.0.0.1
      [ $# -gt 0 ] || set -- status
      exec "$JAVA" @"$d/conf/jvm17.args" -Xms64m -Xmx256m -Dcassandra.config="file://$d/conf/cassandra.yaml" \
        -Dlogback.configurationFile="$d/conf/logback-cli.xml" -cp "$d/conf:$d/lib/*" \
        org.apache.cassandra.tools.NodeTool -h "$HOST" -p "$(port cassandra jmx)" "$@" ;;
    *) die "usage: infra.sh cli <postgres|redis|zookeeper|kafka|cassandra> [args]" ;;
  esac
}

# kafka-topics SUB [ARGS]: Kafka's own topic and console-consumer tools on the running
# broker, from a classpath of their own (fetched on first use).
cmd_kafka_topics() {
  local sub=${1:-} d=$INFRA/kafka bs
  shift || true
  JAVA=$(find_java17) || die "no OpenJDK 17 (run infra.sh up first)"
  JAVA_HOME_17=$(dirname "$(dirname "$(readlink -f "$JAVA")")")
  mkdir -p "$d/logs" "$d/conf"
  fetch kafka tools
  bs=$HOST:$(port kafka port)
  local run=("$JAVA" -Xmx256m -Dlog4j.configuration="file:$d/conf/log4j-cli.properties" -cp "$d/tools-lib/*")
  printf 'log4j.rootLogger=WARN, stderr\nlog4j.appender.stderr=org.apache.log4j.ConsoleAppender\nlog4j.appender.stderr.Target=System.err\nlog4j.appender.stderr.layout=org.apache.log4j.PatternLayout\nlog4j.appender.stderr.layout.ConversionPattern=%%-5p %%m%%n\n' >"$d/conf/log4j-cli.properties"
  case $sub in
    list) exec "${run[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$bs" --list "$@" ;;
    create)
      [ -n "${1:-}" ] || die "usage: infra.sh kafka-topics create TOPIC [PARTITIONS]"
      exec "${run[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$bs" --create --if-not-exists \
        --topic "$1" --partitions "${2:-1}" --replication-factor 1 ;;
    describe)
      [ -n "${1:-}" ] || die "usage: infra.sh kafka-topics describe TOPIC"
      exec "${run[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$bs" --describe --topic "$1" ;;
    read) # every record from the start: time, key, headers (Sundial's identity headers), value
      [ -n "${1:-}" ] || die "usage: infra.sh kafka-topics read TOPIC [MAX]"
      local max=()
      [ -z "${2:-}" ] || max=(--max-messages "$2")
      exec "${run[@]}" org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$bs" --topic "$1" \
        --from-beginning --timeout-ms 10000 "${max[@]}" --property print.timestamp=true \
        --property print.key=true --property print.headers=true ;;
    *) die "usage: infra.sh kafka-topics list | create TOPIC [PARTITIONS] | describe TOPIC | read TOPIC [MAX]" ;;
  esac
}

cmd_reset() {
  cmd_down
  local c
  for c in "${COMPONENTS[@]}"; do rm -rf "$INFRA/$c/data" "$INFRA/$c/logs" "$INFRA/$c/ports"; done
  log "data and logs deleted; jars kept (rm -rf $INFRA for a cold start)"
}

# cluster SUB: the cluster profile (docs/operations.md, "Cluster profile"):
# deploy/local/cluster/*.sh run SUB as well, each on ports of its own.
# CLUSTER says which: empty or 0 none (nothing changes), 1 or all every
# script, or a comma-separated list of script names (CLUSTER=redis,zookeeper:
# redis.sh and zookeeper.sh), so heavy ones (kafka.sh, cassandra.sh: three
# JVMs each) start only when asked (CLUSTER=kafka,cassandra, or 1).
# A name without a script is an error, before any cluster script runs.
# down runs every script whatever CLUSTER says: each stops only what it
# started, so a profile started by make test is stopped by a plain make infra-down.
cluster() {
  local s name names rc=0 want=" " all=
  if [ "$1" = down ]; then
    all=1
  else
    case ${CLUSTER:-0} in
      0 | "") return 0 ;;
      1 | all) all=1 ;;
      *)
        IFS=', ' read -ra names <<<"$CLUSTER"
        for name in "${names[@]}"; do
          [[ $name =~ ^[a-z0-9-]+$ ]] && [ -f "$SRC/cluster/$name.sh" ] ||
            die "CLUSTER=$CLUSTER: no cluster script \"$name\" (have: $(cd "$SRC/cluster" && ls -- *.sh | sed 's/\.sh$//' | paste -sd ' ' -)); 1 or all means every one"
          want+="$name "
        done ;;
    esac
  fi
  for s in "$SRC"/cluster/*.sh; do
    [ -f "$s" ] || continue
    name=$(basename "$s" .sh)
    [ -n "$all" ] || [[ $want == *" $name "* ]] || continue
    # 9>&-: not this script's lock (fd 9, held by up and down) — a
    # component a cluster script starts would inherit it and hold the
    # lock for its whole life, and the next infra.sh up would wait on it.
    bash "$s" "$1" 9>&- || rc=$?
  done
  return $rc
}

case ${1:-} in
  up) cmd_up; cluster up ;;
  down) rc=0; cluster down || rc=$?; cmd_down; exit $rc ;;
  stop) shift; cmd_stop "$@" ;;
  start) shift; cmd_start "$@" ;;
  status) rc=0; cmd_status || rc=$?; cluster status || rc=1; exit $rc ;;
  env) cmd_env; cluster env ;;
  logs) shift; cmd_logs "$@" ;;
  cli) shift; cmd_cli "$@" ;;
  kafka-topics) shift; cmd_kafka_topics "$@" ;;
  reset) cmd_reset ;;
  *) sed -n '3,/^# See docs/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
