#!/usr/bin/env bash
# shellcheck disable=SC2016 # the single-quoted bash -c scripts expand their own parameters
# Prometheus (and Grafana, where one is installed) watching the services that
# `make run` starts on 127.0.0.1 — Sundial's rules loaded, its dashboards
# provisioned. Pid files, logs and data go to .run/ at the repository root.
#
#   observability.sh install  install Prometheus and promtool if missing (Debian package)
#   observability.sh up       start Prometheus on 127.0.0.1:9091 (and Grafana on :3000)
#   observability.sh down     stop what `up` started
#   observability.sh status   one line per process
#
# Prometheus: a binary in .tools/bin, on PATH, or Debian's `prometheus`
# package (2.x, installed by `install` without starting the packaged
# service). Building it with `go install` from the module proxy does not work:
# prometheus/prometheus's go.mod carries replace/exclude directives, and its
# newest release needs module versions the proxy does not serve.
# Grafana is not packaged by Debian and cannot be fetched here; when a
# grafana-server (or grafana) binary is on PATH, `up` runs it with Sundial's
# provisioning, otherwise it says so. `make run-observability` is
# `make run` + `observability.sh up`. See docs/operations.md ("Observe").
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RUN=${SUNDIAL_RUN_DIR:-$ROOT/.run}
PROM_ADDR=${SUNDIAL_PROMETHEUS_ADDR:-127.0.0.1:9091}
GRAFANA_PORT=${SUNDIAL_GRAFANA_PORT:-3000}
STOP_TIMEOUT=20

log() { printf '[observability] %s\n' "$*" >&2; }
die() { printf '[observability] error: %s\n' "$*" >&2; exit 1; }

find_bin() { # name: .tools/bin first, then PATH
  if [ -x "$ROOT/.tools/bin/$1" ]; then echo "$ROOT/.tools/bin/$1"; return 0; fi
  command -v "$1" 2>/dev/null
}

cmd_install() {
  if find_bin prometheus >/dev/null && find_bin promtool >/dev/null; then return 0; fi
  [ "$(id -u)" = 0 ] || die "Prometheus is missing and installing it needs root: apt-get install --no-install-recommends prometheus"
  local policy=/usr/sbin/policy-rc.d made_policy=
  # The package's postinst would start a Prometheus on :9090, the api's gRPC
  # port. policy-rc.d exit 101 tells invoke-rc.d not to start anything.
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
  fi
  log "installing Debian's prometheus (for prometheus and promtool)"
  local rc=0
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } || rc=$?
  [ -z "$made_policy" ] || rm -f "$policy"
  [ "$rc" = 0 ] || die "apt-get install prometheus failed"
  # A packaged service started anyway (no policy-rc.d support) would hold :9090.
  if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
    systemctl stop prometheus || true
  fi
}

pid_of() { [ -s "$RUN/$1.pid" ] && tr -dc '0-9' <"$RUN/$1.pid"; return 0; }

is_running() { # name binary: the pid file names a live process of that binary
  local pid exe
  pid=$(pid_of "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [ "$(basename "${exe% (deleted)}")" = "$2" ]
}

start_bg() { # name log args...: a detached process with a pid file
  local name=$1; shift
  rm -f "$RUN/$name.pid"
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$RUN/$name.pid" "$@" \
    >>"$RUN/$name.log" 2>&1 </dev/null 9>&- &
  disown || true
}

wait_http() { # name url seconds
  local deadline=$((SECONDS + $3))
  until curl -fsS -m 2 -o /dev/null "$2" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -n 20 "$RUN/$1.log" >&2 || true
      die "$1 did not answer $2 within $3 s (log: $RUN/$1.log)"
    fi
    sleep 0.3
  done
}

cmd_up() {
  mkdir -p "$RUN"
  cmd_install
  local prom
  prom=$(find_bin prometheus) || die "no prometheus binary"
  if is_running prometheus "$(basename "$prom")"; then
    log "prometheus: already running (pid $(pid_of prometheus))"
  else
    mkdir -p "$RUN/prometheus-data"
    log "prometheus: starting $prom on http://$PROM_ADDR/ (log $RUN/prometheus.log)"
    start_bg prometheus "$prom" \
      --config.file="$ROOT/deploy/prometheus/prometheus-local.yml" \
      --storage.tsdb.path="$RUN/prometheus-data" \
      --storage.tsdb.retention.time=2d \
      --web.listen-address="$PROM_ADDR" \
      --web.enable-lifecycle
    wait_http prometheus "http://$PROM_ADDR/-/ready" 60
  fi
  log "prometheus: ready; targets at http://$PROM_ADDR/targets, alerts at http://$PROM_ADDR/alerts"

  local grafana
  grafana=$(find_bin grafana-server || find_bin grafana || true)
  if [ -z "$grafana" ]; then
    log "grafana: not installed (Debian has no package); import deploy/grafana/dashboards/*.json into any Grafana, data source http://$PROM_ADDR"
    return 0
  fi
  if is_running grafana "$(basename "$grafana")"; then
    log "grafana: already running (pid $(pid_of grafana))"
    return 0
  fi
  local args=()
  [ "$(basename "$grafana")" = grafana ] && args=(server)
  local home
  home=$(dirname "$(dirname "$(readlink -f "$grafana")")")
  [ -d "$home/share/grafana" ] && home=$home/share/grafana
  mkdir -p "$RUN/grafana-data"
  log "grafana: starting on http://127.0.0.1:$GRAFANA_PORT/ (log $RUN/grafana.log)"
  start_bg grafana env \
    SUNDIAL_PROMETHEUS_URL="http://$PROM_ADDR" \
    SUNDIAL_DASHBOARDS_DIR="$ROOT/deploy/grafana/dashboards" \
    GF_PATHS_PROVISIONING="$ROOT/deploy/grafana/provisioning" \
    GF_PATHS_DATA="$RUN/grafana-data" \
    GF_PATHS_LOGS="$RUN/grafana-data/log" \
    GF_SERVER_HTTP_ADDR=127.0.0.1 GF_SERVER_HTTP_PORT="$GRAFANA_PORT" \
    GF_AUTH_ANONYMOUS_ENABLED=true GF_AUTH_ANONYMOUS_ORG_ROLE=Viewer \
    GF_ANALYTICS_REPORTING_ENABLED=false GF_ANALYTICS_CHECK_FOR_UPDATES=false \
    "$grafana" "${args[@]}" --homepath "$home"
  wait_http grafana "http://127.0.0.1:$GRAFANA_PORT/api/health" 90
  log "grafana: ready; dashboards in the Sundial folder"
}

stop_one() { # name
  local pid deadline
  pid=$(pid_of "$1")
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then rm -f "$RUN/$1.pid"; return 0; fi
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
    sleep 0.1
  done
  rm -f "$RUN/$1.pid"
  log "$1: stopped (was pid $pid)"
}

cmd_down() {
  [ -d "$RUN" ] || return 0
  stop_one grafana
  stop_one prometheus
}

cmd_status() {
  local n pid rc=0
  for n in prometheus grafana; do
    pid=$(pid_of "$n")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      printf '%-11s up    pid %s\n' "$n" "$pid"
    else
      printf '%-11s down\n' "$n"
      [ "$n" = grafana ] || rc=1
    fi
  done
  return $rc
}

case ${1:-} in
  install) cmd_install ;;
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) sed -n '3,/^# `make run-observability`/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
