#!/usr/bin/env bash
# shellcheck disable=SC2016 # the single-quoted bash -c scripts expand their own parameters
# Runs Sundial's four services (bin/sundial-{api,prefetcher,relay,worker}, built
# by `make build`) as background processes against the local infrastructure
# (deploy/local/infra.sh). Pid files and logs go to .run/ at the repository root.
#
#   platform.sh run          what `make run` is: infra.sh up and `make build` side by side,
#                            then up; prints the time each part took
#   platform.sh up           start what is not running; wait for each /healthz and /readyz
#   platform.sh down         SIGTERM each instance, wait for its drain (SIGKILL after a timeout)
#   platform.sh restart I..  stop and start instances (worker-2) or every instance of a service (worker)
#   platform.sh status       one line per instance: up/unready/down, admin address, pid
#   platform.sh config       the settings remembered in .run/platform.env
#   platform.sh env I        the settings instance I starts with
#   platform.sh logs I       the log of instance I (-f to follow; I may also be sink)
#
# Replicas: SUNDIAL_PLATFORM_{APIS,PREFETCHERS,RELAYS,WORKERS} (default 1 each;
# `make run WORKERS=2 PREFETCHERS=2 RELAYS=2` sets them) run that many of a
# service: the first is named like the service (worker, admin 127.0.0.1:8084),
# the next worker-2, worker-3 (admin port +100 each: 8184, 8284); api-N serves
# gRPC on 9090+N-1.
#
# `up` remembers its configuration in .run/platform.env: the replica counts
# and every SUNDIAL_* setting it ran with (tokens, target allowlist, log
# level...). A later up or restart loads it first, so a service
# restarted after a kill keeps them; a variable set in the caller's
# environment still wins and is remembered in turn. Delete the file to forget.
#
# The api serves TLS on its gRPC and HTTP ports with certificates in
# .run/tls signed by the one development CA, the one infra.sh makes in
# .infra/tls for the components (`sundial-api dev-tls --ca-dir .infra/tls`):
# schedctl needs SUNDIAL_CA=.infra/tls/ca.crt, which `up` prints.
# SUNDIAL_DEV_TLS=0 serves plaintext instead; SUNDIAL_TLS_CERT_FILE and
# SUNDIAL_TLS_KEY_FILE serve a certificate of yours.
#
# After the services, `up` starts a demo target (bin/schedctl sink on
# 127.0.0.1:8099, printing every request to .run/sink.log) and registers a
# demo job firing it every second (idempotently: a second `up` finds the same
# job). SUNDIAL_DEMO=0 skips both.
#
# `make run` is platform.sh run (infra.sh up beside make build, then up);
# `make stop` is platform.sh down.
# See docs/operations.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RUN=${SUNDIAL_RUN_DIR:-$ROOT/.run}
BIN=${SUNDIAL_BIN_DIR:-$ROOT/bin}
SERVICES=(api prefetcher relay worker)
ENV_FILE=$RUN/platform.env

log() { printf '[platform] %s\n' "$*" >&2; }
die() { printf '[platform] error: %s\n' "$*" >&2; exit 1; }
# shellcheck source-path=SCRIPTDIR source=host.bash
source "$ROOT/deploy/local/host.bash"

# load_config: the remembered settings, for every variable the caller did not set.
load_config() {
  [ -f "$ENV_FILE" ] || return 0
  local line k
  while IFS= read -r line; do
    [[ $line == SUNDIAL_*=* ]] || continue
    k=${line%%=*}
    if [ -z "${!k+x}" ]; then export "${line?}"; fi
  done <"$ENV_FILE"
}

# save_config: every SUNDIAL_* setting in force now, except where the
# components listen (infra.sh's business) and this script's own folders.
save_config() {
  local tmp=$ENV_FILE.tmp
  (
    umask 077 # it may hold tokens
    # (grep finding no line, in a shell without SUNDIAL_* settings, is
    # an empty file, not a failure)
    { env | grep '^SUNDIAL_' || true; } |
      { grep -Ev '^SUNDIAL_(TEST_[A-Z_]*|INFRA_DIR|RUN_DIR|BIN_DIR|PG_PORT|REDIS_PORT|ZK_PORT|KAFKA_PORT|KAFKA_CONTROLLER_PORT|CASSANDRA_PORT|CASSANDRA_STORAGE_PORT|CASSANDRA_JMX_PORT)=' || true; } | sort >"$tmp"
  )
  mv "$tmp" "$ENV_FILE"
}

load_config
# CLUSTER (make run CLUSTER=1, or some of redis,zookeeper,postgres,kafka,
# cassandra): infra.sh up starts those components of the cluster profile
# (deploy/local/cluster/) beside the single nodes, and the services run on
# them (service_env) instead of the single nodes. Remembered with the rest
# as SUNDIAL_PLATFORM_CLUSTER, so a later up or restart keeps the services
# on the same components; CLUSTER=0 goes back to the single nodes.
CLUSTER=${CLUSTER:-${SUNDIAL_PLATFORM_CLUSTER:-}}
[ "$CLUSTER" != 0 ] || CLUSTER=
case $CLUSTER in
  "" | 1 | all) ;;
  *)
    IFS=', ' read -ra cluster_names <<<"$CLUSTER"
    for name in "${cluster_names[@]}"; do
      [[ $name =~ ^[a-z0-9-]+$ ]] && [ -f "$ROOT/deploy/local/cluster/$name.sh" ] ||
        die "CLUSTER=$CLUSTER: no cluster script \"$name\" in deploy/local/cluster/; 1 or all means every one, 0 none"
    done ;;
esac
export CLUSTER SUNDIAL_PLATFORM_CLUSTER=$CLUSTER
READY_TIMEOUT=${SUNDIAL_PLATFORM_READY_TIMEOUT:-90}
# A service drains for up to its --drain-timeout (30 s by default) on SIGTERM.
STOP_TIMEOUT=${SUNDIAL_PLATFORM_STOP_TIMEOUT:-40}
DEMO=${SUNDIAL_DEMO:-1}
SINK_ADDR=${SUNDIAL_DEMO_SINK_ADDR:-127.0.0.1:8099}
# The dev tenant's bootstrap token: SUNDIAL_DEV_TOKEN, else the one made at
# the first start (random, kept in $RUN/dev-token), never a constant anyone
# could guess (a .run/ of an older version held the string "dev-token").
dev_token() {
  if [ -n "${SUNDIAL_DEV_TOKEN:-}" ]; then
    printf %s "$SUNDIAL_DEV_TOKEN"
  elif [ -s "$RUN/dev-token" ] && [ "$(cat "$RUN/dev-token")" != dev-token ]; then
    cat "$RUN/dev-token"
  else
    printf 'dev-%s' "$(head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 32)"
  fi
}
DEV_TOKEN=$(dev_token)
DEV_TLS=${SUNDIAL_DEV_TLS:-1}

count_of() { # service -> how many instances run
  local n
  case $1 in
    api) n=${SUNDIAL_PLATFORM_APIS:-1} ;;
    prefetcher) n=${SUNDIAL_PLATFORM_PREFETCHERS:-1} ;;
    relay) n=${SUNDIAL_PLATFORM_RELAYS:-1} ;;
    worker) n=${SUNDIAL_PLATFORM_WORKERS:-1} ;;
  esac
  [[ $n =~ ^[1-9][0-9]?$ ]] || die "the number of ${1}s must be 1 to 99, got '$n'"
  echo "$n"
}

instances_of() { # service -> its instance names: worker worker-2 ...
  local i n
  n=$(count_of "$1")
  echo "$1"
  for ((i = 2; i <= n; i++)); do echo "$1-$i"; done
}

all_instances() { local s; for s in "${SERVICES[@]}"; do instances_of "$s"; done; }

# running_instances: every instance with a pid file, counted or not (after a
# scale-down, `down` still stops the extra ones).
running_instances() {
  local f i
  for f in "$RUN"/*.pid; do
    [ -e "$f" ] || continue
    i=$(basename "$f" .pid)
    [ "$i" = sink ] || echo "$i"
  done
}

service_of() { echo "${1%-[0-9]*}"; } # worker-2 -> worker
index_of() { if [[ $1 == *-[0-9]* ]]; then echo "${1##*-}"; else echo 1; fi; }

admin_addr() { # instance
  local base
  case $(service_of "$1") in
    api) base=8081 ;;
    prefetcher) base=8082 ;;
    relay) base=8083 ;;
    worker) base=8084 ;;
  esac
  echo "127.0.0.1:$((base + 100 * ($(index_of "$1") - 1)))"
}

http_addr() { # api instance: the HTTP/JSON API and the web console
  if [ "$1" = api ]; then echo "${SUNDIAL_HTTP_ADDR:-127.0.0.1:8080}"; else echo "127.0.0.1:$((8080 + 100 * ($(index_of "$1") - 1)))"; fi
}

grpc_addr() { # api instance
  if [ "$1" = api ]; then echo "${SUNDIAL_GRPC_ADDR:-127.0.0.1:9090}"; else echo "127.0.0.1:$((9089 + $(index_of "$1")))"; fi
}

# service_env I: the settings instance I starts with, as SUNDIAL_<FLAG>=value.
# pkg/process/config fills every flag not given on the command line from SUNDIAL_<FLAG>
# (upper case, '-' as '_'), and a service without that flag ignores the
# variable, so wiring a new flag is one line here. A variable already set in
# the caller's environment wins for the shared settings (SUNDIAL_LOG_LEVEL=debug
# make run), not for the per-service addresses.
service_env() {
  # shared: where the infrastructure is (from infra.sh env: a component of
  # the cluster profile CLUSTER names, else its single node) and how to log
  echo "SUNDIAL_POSTGRES_DSN=${SUNDIAL_POSTGRES_DSN:-$(on_cluster postgres SUNDIAL_TEST_PG_HA_DSN SUNDIAL_TEST_POSTGRES_DSN)}"
  echo "SUNDIAL_REDIS_ADDR=${SUNDIAL_REDIS_ADDR:-$(on_cluster redis SUNDIAL_TEST_REDIS_CLUSTER_ADDRS SUNDIAL_TEST_REDIS_ADDR)}"
  echo "SUNDIAL_ZK_ADDRS=${SUNDIAL_ZK_ADDRS:-$(on_cluster zookeeper SUNDIAL_TEST_ZK_ENSEMBLE_ADDRS SUNDIAL_TEST_ZK_ADDRS)}"
  echo "SUNDIAL_KAFKA_BROKERS=${SUNDIAL_KAFKA_BROKERS:-$(on_cluster kafka SUNDIAL_TEST_KAFKA_CLUSTER_BROKERS SUNDIAL_TEST_KAFKA_BROKERS)}"
  echo "SUNDIAL_CASSANDRA_HOSTS=${SUNDIAL_CASSANDRA_HOSTS:-$(on_cluster cassandra SUNDIAL_TEST_CASSANDRA_RING_HOSTS SUNDIAL_TEST_CASSANDRA_HOSTS)}"
  if clustered cassandra && [ -z "${SUNDIAL_CASSANDRA_HOSTS:-}" ]; then
    # the api creates the ledger keyspace on the ring at replication
    # factor 3, which the services' LOCAL_QUORUM calls need
    echo "SUNDIAL_CASSANDRA_REPLICATION=${SUNDIAL_CASSANDRA_REPLICATION:-$RING_REPLICATION}"
  fi
  echo "SUNDIAL_LOG_LEVEL=${SUNDIAL_LOG_LEVEL:-info}"
  echo "SUNDIAL_LOG_FORMAT=${SUNDIAL_LOG_FORMAT:-text}"
  # Per-tenant signing keys and target secrets for development (api and
  # workers; the others have no such flags): a key-encryption key and a
  # secrets directory, <dir>/<tenant>/<name>, made once by dev_files.
  echo "SUNDIAL_SIGNING_KEY_ENCRYPTION_KEY_FILE=${SUNDIAL_SIGNING_KEY_ENCRYPTION_KEY_FILE:-$RUN/dev-signing-kek}"
  echo "SUNDIAL_SECRETS_DIR=${SUNDIAL_SECRETS_DIR:-$RUN/target-secrets}"
  # per service
  echo "SUNDIAL_ADMIN_ADDR=$(admin_addr "$1")"
  case $(service_of "$1") in
    api)
      echo "SUNDIAL_GRPC_ADDR=$(grpc_addr "$1")"
      echo "SUNDIAL_HTTP_ADDR=$(http_addr "$1")"
      # a development tenant, so `make run` serves requests out of the box:
      # its token's argon2id hash in a tokens file (dev_files), which the
      # api reads again when it changes; a caller's SUNDIAL_TOKENS (plain,
      # deprecated) is passed on as given
      if [ -n "${SUNDIAL_TOKENS:-}" ]; then
        echo "SUNDIAL_TOKENS=$SUNDIAL_TOKENS"
      else
        echo "SUNDIAL_TOKENS_FILE=${SUNDIAL_TOKENS_FILE:-$RUN/api-tokens.yaml}"
      fi
      # TLS with the development CA's certificate (dev_files), unless the
      # caller gave one or turned it off
      if dev_tls; then
        echo "SUNDIAL_TLS_CERT_FILE=$RUN/tls/tls.crt"
        echo "SUNDIAL_TLS_KEY_FILE=$RUN/tls/tls.key"
      fi
      ;;
    prefetcher)
      # a development ZooKeeper identity (dev_zookeeper): the nodes the
      # prefetchers create admit only it, and an open tree left by an
      # older run is tightened to it at start
      if [ -z "${SUNDIAL_ZK_USERNAME:-}" ]; then
        echo "SUNDIAL_ZK_USERNAME=sundial"
        echo "SUNDIAL_ZK_PASSWORD_FILE=$RUN/dev-zookeeper-password"
      fi
      ;;
    relay) ;;
    worker)
      # (each tenant's own key signs its target requests: no platform
      # secret; the demo sink verifies with the dev tenant's, dev_signing_key)
      # the demo sink listens on loopback, which the outbound-address
      # policy refuses unless allowlisted
      echo "SUNDIAL_ALLOW_TARGET_ADDRS=${SUNDIAL_ALLOW_TARGET_ADDRS:-$SINK_ADDR}"
      ;;
  esac
}

# The ledger keyspace's replication on the cluster profile's 3-node ring.
RING_REPLICATION="{'class': 'SimpleStrategy', 'replication_factor': 3}"

# clustered C: whether CLUSTER names component C's cluster (1 or all: every one).
clustered() {
  case ",${CLUSTER// /}," in
    ,1, | ,all,) return 0 ;;
    *",$1,"*) return 0 ;;
  esac
  return 1
}

# on_cluster C CLUSTER_VAR SINGLE_VAR: the value of CLUSTER_VAR (what
# deploy/local/cluster/C.sh env prints) when CLUSTER names C, else of
# SINGLE_VAR. A cluster named whose script printed nothing is an error: the
# services must not fall back to the single node unnoticed.
on_cluster() {
  if clustered "$1"; then
    [ -n "${!2:-}" ] || die "CLUSTER=$CLUSTER names $1, but infra.sh env printed no $2"
    echo "${!2}"
  else
    echo "${!3:-}"
  fi
}

pid_of() { [ -s "$RUN/$1.pid" ] && tr -dc '0-9' <"$RUN/$1.pid"; return 0; }

binary_of() { # the executable behind a name: the sink is schedctl's
  if [ "$1" = sink ]; then echo "$BIN/schedctl"; else echo "$BIN/sundial-$(service_of "$1")"; fi
}

is_running() { # the pid file names a live process running this checkout's binary
  local pid exe
  pid=$(pid_of "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [ "${exe% (deleted)}" = "$(binary_of "$1")" ]
}

http_ok() { curl -fsS -m 2 -o /dev/null "http://$1" 2>/dev/null; }

start_one() { # instance
  local s=$1 env_args=()
  local bin
  bin=$(binary_of "$s")
  [ -x "$bin" ] || die "$bin is missing: run 'make build' first"
  mapfile -t env_args < <(service_env "$s")
  rm -f "$RUN/$s.pid"
  # setsid: the service outlives this script and the terminal's Ctrl-C;
  # the pid written is the service's own (bash execs in place).
  setsid env "${env_args[@]}" bash -c 'echo $$ >"$0"; exec "$@"' "$RUN/$s.pid" "$bin" \
    >>"$RUN/$s.log" 2>&1 </dev/null 9>&- &
  disown || true
}

wait_ready() { # service: /healthz (alive) then /readyz (dependencies answer)
  local s=$1 addr start=$SECONDS path
  addr=$(admin_addr "$s")
  for path in healthz readyz; do
    until http_ok "$addr/$path"; do
      if ! is_running "$s" && [ $((SECONDS - start)) -ge 3 ]; then
        tail -n 30 "$RUN/$s.log" >&2 || true
        die "$s exited while starting (log: $RUN/$s.log)"
      fi
      if [ $((SECONDS - start)) -ge "$READY_TIMEOUT" ]; then
        tail -n 30 "$RUN/$s.log" >&2 || true
        curl -sS -m 2 "http://$addr/$path" >&2 || true
        die "$s: /$path did not answer OK within ${READY_TIMEOUT}s (log: $RUN/$s.log; 'make stop' ends the others)"
      fi
      sleep 0.2
    done
  done
}

take_lock() {
  mkdir -p "$RUN"
  hold_lock "$RUN/.lock" 300
}

# dev_tls: whether the api serves the development CA's certificate (the
# default), rather than the caller's or none.
dev_tls() { [ "$DEV_TLS" != 0 ] && [ -z "${SUNDIAL_TLS_CERT_FILE:-}" ]; }

# dev_ca_dir: the development CA's directory, the one infra.sh makes (in
# its SUNDIAL_INFRA_DIR, .infra by default): ca.crt and ca.key.
dev_ca_dir() { echo "${SUNDIAL_INFRA_DIR:-$ROOT/.infra}/tls"; }

# api_ca: the CA file schedctl verifies the api with: the development CA,
# the caller's SUNDIAL_CA with a certificate of the caller's, or empty for
# plaintext.
api_ca() {
  if dev_tls; then
    echo "$(dev_ca_dir)/ca.crt"
  elif [ -n "${SUNDIAL_TLS_CERT_FILE:-}" ]; then
    echo "${SUNDIAL_CA:-}"
  fi
  return 0
}

# api_scheme: how the HTTP port is reached.
api_scheme() {
  if dev_tls || [ -n "${SUNDIAL_TLS_CERT_FILE:-}" ]; then echo https; else echo http; fi
}

# dev_files makes the development key-encryption key, the dev tenant's
# (empty) target-secret directory and the development CA and certificates,
# unless the caller named its own.
dev_files() {
  if [ -z "${SUNDIAL_SIGNING_KEY_ENCRYPTION_KEY_FILE:-}" ] && [ ! -s "$RUN/dev-signing-kek" ]; then
    (umask 077 && head -c 48 /dev/urandom | base64 >"$RUN/dev-signing-kek")
  fi
  [ -n "${SUNDIAL_SECRETS_DIR:-}" ] || mkdir -p "$RUN/target-secrets/dev"
  # The dev tenant's bootstrap token: the api's tokens file holds only its
  # hash; the token itself is $DEV_TOKEN (SUNDIAL_DEV_TOKEN), kept in
  # $RUN/dev-token for the operator. Hashed again when it changes.
  if [ -z "${SUNDIAL_TOKENS_FILE:-}" ] && [ -z "${SUNDIAL_TOKENS:-}" ] &&
    { [ ! -s "$RUN/api-tokens.yaml" ] || [ "$(cat "$RUN/dev-token" 2>/dev/null)" != "$DEV_TOKEN" ]; }; then
    [ -x "$BIN/schedctl" ] || die "$BIN/schedctl is missing: run 'make build' first"
    (
      umask 077
      printf %s "$DEV_TOKEN" >"$RUN/dev-token"
      printf %s "$DEV_TOKEN" | "$BIN/schedctl" token hash --principal dev >"$RUN/api-tokens.yaml.tmp" &&
        mv "$RUN/api-tokens.yaml.tmp" "$RUN/api-tokens.yaml"
    ) || die "hashing the development token into $RUN/api-tokens.yaml failed"
  fi
  if dev_tls; then
    [ -x "$BIN/sundial-api" ] || die "$BIN/sundial-api is missing: run 'make build' first"
    # Signed by infra.sh's CA; kept while valid for another week, and the
    # api reloads renewed files by itself.
    "$BIN/sundial-api" dev-tls --ca-dir "$(dev_ca_dir)" --dir "$RUN/tls" >/dev/null ||
      die "signing the api's certificates in $RUN/tls with the development CA in $(dev_ca_dir) failed"
  fi
}

# dev_zookeeper makes the prefetchers' development ZooKeeper digest
# password (user sundial), once, unless the caller named an identity.
dev_zookeeper() {
  if [ -z "${SUNDIAL_ZK_USERNAME:-}" ] && [ ! -s "$RUN/dev-zookeeper-password" ]; then
    (umask 077 && head -c 24 /dev/urandom | base64 >"$RUN/dev-zookeeper-password")
  fi
}

# start_instances I...: start those not running (the apis first: the first
# applies the Postgres migrations the others rely on), then wait for each.
start_instances() {
  local s t0=$SECONDS
  # shellcheck source=/dev/null
  source <("$ROOT/deploy/local/infra.sh" env)
  dev_files
  dev_zookeeper
  for s in "$@"; do
    if is_running "$s"; then
      log "$s: already running (pid $(pid_of "$s")), left alone"
    else
      log "$s: starting (log $RUN/$s.log)"
      start_one "$s"
    fi
    if [ "$s" = api ]; then
      wait_ready api
      log "api: ready on $(admin_addr api)"
      if dev_tls; then
        log "api: serves TLS on gRPC $(grpc_addr api) and HTTP $(http_addr api) with the development CA $(api_ca) (SUNDIAL_DEV_TLS=0 make run for plaintext)"
      elif [ -z "${SUNDIAL_TLS_CERT_FILE:-}" ]; then
        log "api: serves plaintext on gRPC $(grpc_addr api) and HTTP $(http_addr api) (SUNDIAL_DEV_TLS=0)"
      fi
    fi
  done
  for s in "$@"; do
    [ "$s" = api ] && continue
    wait_ready "$s"
    log "$s: ready on $(admin_addr "$s")"
  done
  log "up in $((SECONDS - t0))s: $*"
}

cmd_up() { # [--infra-checked: infra.sh up just succeeded, skip its status]
  local t=$SECONDS
  command -v curl >/dev/null || die "curl is missing (apt-get install curl)"
  take_lock
  if [ "${1:-}" != --infra-checked ]; then
    "$ROOT/deploy/local/infra.sh" status >/dev/null ||
      log "warning: not every infrastructure component is up (make infra-up); services may not become ready"
  fi
  local s
  for s in "${SERVICES[@]}"; do count_of "$s" >/dev/null; done
  save_config
  local want
  mapfile -t want < <(all_instances)
  start_instances "${want[@]}"
  # instances beyond the counts (a scale-down since the last up) are stopped
  for s in $(running_instances); do
    if ! printf '%s\n' "${want[@]}" | grep -qx "$s"; then stop_one "$s"; fi
  done
  UP_SERVICES_S=$((SECONDS - t)) t=$SECONDS
  [ "$DEMO" = 0 ] || demo_up
  UP_DEMO_S=$((SECONDS - t))
}

# run: the components (infra.sh up) and the binaries (make build) side by
# side — a fresh machine spends the one downloading packages and jars and
# booting JVMs while the other downloads modules and compiles — then up,
# and the time each part took. The components' output is prefixed [infra].
cmd_run() {
  local t0 rc_file infra irc=0 iend brc=0 bend
  t0=$(date +%s)
  mkdir -p "$RUN"
  rc_file=$(mktemp "$RUN/.infra-up.XXXXXX")
  (
    rc=0
    "$ROOT/deploy/local/infra.sh" up || rc=$?
    echo "$rc $(date +%s)" >"$rc_file"
  ) &
  infra=$!
  make -C "$ROOT" --no-print-directory build || brc=$?
  bend=$(date +%s)
  wait "$infra" || true
  read -r irc iend <"$rc_file" || irc=1 iend=$(date +%s)
  rm -f "$rc_file"
  [ "$irc" = 0 ] || die "infra.sh up failed (above; logs: deploy/local/infra.sh logs <component>)"
  [ "$brc" = 0 ] || die "make build failed (above)"
  cmd_up --infra-checked
  local demo="demo job ${UP_DEMO_S}s"
  [ "$DEMO" != 0 ] || demo="no demo job (SUNDIAL_DEMO=0)"
  log "make run took $(($(date +%s) - t0))s: components $((iend - t0))s and build $((bend - t0))s side by side, services ${UP_SERVICES_S}s, $demo"
}

# restart I...: instances by name (worker-2), or every instance of a service
# (worker), stopped and started again with the remembered configuration.
cmd_restart() {
  [ $# -gt 0 ] || die "usage: platform.sh restart <api|prefetcher|relay|worker|instance such as worker-2>..."
  command -v curl >/dev/null || die "curl is missing (apt-get install curl)"
  take_lock
  local a s targets=()
  for a in "$@"; do
    case $(service_of "$a") in
      api | prefetcher | relay | worker) ;;
      *) die "unknown service or instance '$a'" ;;
    esac
    if [ "$a" = "$(service_of "$a")" ]; then mapfile -t -O "${#targets[@]}" targets < <(instances_of "$a"); else targets+=("$a"); fi
  done
  for s in "${targets[@]}"; do stop_one "$s"; done
  start_instances "${targets[@]}"
}

# dev_signing_key keeps the development tenant's webhook signing key in
# $RUN/dev-signing-key for the demo sink to verify with: the api shows a
# tenant's key once (signing-key create; made now, or by its first job),
# so it is asked for when the file is missing and whenever the api shows
# one (a fresh database); a key shown before whose file is gone is
# replaced by a rotation without overlap.
dev_signing_key() {
  local sctl=$BIN/schedctl file=$RUN/dev-signing-key out secret
  out=$(SUNDIAL_CA=$(api_ca) "$sctl" signing-key create --addr "$(grpc_addr api)" --token "$DEV_TOKEN" -o json 2>/dev/null) || out=
  if [ -z "$out" ]; then
    [ -s "$file" ] && return 0
    out=$(SUNDIAL_CA=$(api_ca) "$sctl" signing-key rotate --overlap 0s --addr "$(grpc_addr api)" --token "$DEV_TOKEN" -o json) ||
      die "getting the dev tenant's signing key failed"
  fi
  secret=$(printf '%s' "$out" | sed -n 's/.*"secret": *"\([^"]*\)".*/\1/p' | head -n 1)
  [ -n "$secret" ] || die "the api showed no signing key for the dev tenant"
  (umask 077 && printf '%s\n' "$secret" >"$file.tmp") && mv "$file.tmp" "$file"
}

# demo_up starts the demo sink and registers the demo job (once: the
# idempotency key makes a second registration return the first job).
demo_up() {
  local sctl=$BIN/schedctl out id deadline
  [ -x "$sctl" ] || die "$sctl is missing: run 'make build' first"
  dev_signing_key
  if is_running sink; then
    log "sink: already running (pid $(pid_of sink)), left alone"
  else
    rm -f "$RUN/sink.pid"
    setsid env SUNDIAL_SIGNING_SECRET="$(cat "$RUN/dev-signing-key")" bash -c 'echo $$ >"$0"; exec "$@"' "$RUN/sink.pid" \
      "$sctl" sink --addr "$SINK_ADDR" >>"$RUN/sink.log" 2>&1 </dev/null 9>&- &
    disown || true
    deadline=$((SECONDS + 10))
    until (exec 3<>"/dev/tcp/${SINK_ADDR%:*}/${SINK_ADDR##*:}") 2>/dev/null; do
      [ "$SECONDS" -lt "$deadline" ] || die "the demo sink did not listen on $SINK_ADDR (log: $RUN/sink.log)"
      sleep 0.1
    done
    log "sink: listening on http://$SINK_ADDR/ (log $RUN/sink.log)"
  fi
  out=$(SUNDIAL_CA=$(api_ca) "$sctl" create --addr "$(grpc_addr api)" --token "$DEV_TOKEN" \
    --name demo-every-second --cron '* * * * * *' --url "http://$SINK_ADDR/demo" \
    --payload '{"hello":"sundial"}' --label demo=true --idempotency-key demo-every-second -o json) ||
    die "registering the demo job failed"
  id=$(printf '%s' "$out" | sed -n 's/.*"id": *"\([0-9a-f-]\{36\}\)".*/\1/p' | head -n 1)
  log "demo job $id fires http://$SINK_ADDR/demo every second"
  log "  watch it:   tail -f $RUN/sink.log"
  if [ -n "$(api_ca)" ]; then
    log "  schedctl:   export SUNDIAL_ADDR=$(grpc_addr api) SUNDIAL_TOKEN=$DEV_TOKEN SUNDIAL_CA=$(api_ca)"
  else
    log "  schedctl:   export SUNDIAL_ADDR=$(grpc_addr api) SUNDIAL_TOKEN=$DEV_TOKEN"
  fi
  log "  history:    bin/schedctl history $id"
  log "  console:    $(api_scheme)://$(http_addr api)/ (sign in with the token $DEV_TOKEN)"
  if dev_tls; then
    log "              a browser does not know the development CA: import $(api_ca) or accept its warning"
  fi
}

stop_one() {
  local s=$1 pid deadline
  is_running "$s" || { rm -f "$RUN/$s.pid"; return 0; }
  pid=$(pid_of "$s")
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "$s: still running ${STOP_TIMEOUT}s after SIGTERM, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    sleep 0.1
  done
  rm -f "$RUN/$s.pid"
  log "$s: stopped (was pid $pid)"
}

cmd_down() {
  [ -d "$RUN" ] || { log "nothing to stop"; return 0; }
  take_lock
  local s all
  mapfile -t all < <({ all_instances; running_instances; } | sort -u)
  for s in "${all[@]}" sink; do stop_one "$s" & done
  wait
  for s in "${all[@]}"; do
    if is_running "$s"; then die "$s is still running (pid $(pid_of "$s"))"; fi
  done
  log "all services down (configuration kept in $ENV_FILE)"
}

cmd_config() {
  if [ -f "$ENV_FILE" ]; then
    # secrets are shown by name only
    sed -E 's/^((SUNDIAL_[A-Z_]*(TOKENS|SECRET|PASSWORD)[A-Z_]*)=).*/\1<set>/' "$ENV_FILE"
  else
    log "nothing remembered yet ($ENV_FILE is written by up)"
  fi
}

# env I: the settings instance I would start with (service_env), secrets
# by name only.
cmd_env() {
  [ $# = 1 ] || die "usage: platform.sh env <instance such as api or worker-2>"
  case $(service_of "$1") in
    api | prefetcher | relay | worker) ;;
    *) die "unknown service or instance '$1'" ;;
  esac
  # shellcheck source=/dev/null
  source <("$ROOT/deploy/local/infra.sh" env)
  service_env "$1" | sed -E 's/^((SUNDIAL_[A-Z_]*(TOKENS|SECRET|PASSWORD)[A-Z_]*)=).*/\1<set>/'
}

cmd_status() {
  local s state pid addr rc=0
  for s in $({ all_instances; running_instances; } | sort -u); do
    addr=$(admin_addr "$s")
    pid=$(pid_of "$s")
    if is_running "$s"; then
      if http_ok "$addr/readyz"; then state=up; else state=unready; rc=1; fi
    else
      state=down pid=- rc=1
    fi
    printf '%-13s %-8s admin http://%-16s pid %s\n' "$s" "$state" "$addr" "${pid:--}"
  done
  if is_running sink; then
    printf '%-13s %-8s http://%-22s pid %s\n' sink up "$SINK_ADDR" "$(pid_of sink)"
  fi
  return $rc
}

cmd_logs() {
  local s=${1:-}
  [ -f "$RUN/$s.log" ] || die "usage: platform.sh logs <api|prefetcher|relay|worker|instance such as worker-2|sink> [-f] (no log at $RUN/$s.log)"
  if [ "${2:-}" = -f ]; then tail -n 100 -F "$RUN/$s.log"; else tail -n 200 "$RUN/$s.log"; fi
}

case ${1:-} in
  run) cmd_run ;;
  up) cmd_up ;;
  down) cmd_down ;;
  restart) shift; cmd_restart "$@" ;;
  status) cmd_status ;;
  config) cmd_config ;;
  env) shift; cmd_env "$@" ;;
  logs) shift; cmd_logs "$@" ;;
  *) sed -n '3,/^# See docs/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
