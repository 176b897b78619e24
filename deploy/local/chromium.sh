#!/usr/bin/env bash
# Headless Chromium for the console's browser tests (make test-browser),
# from Debian's packages like the other components: no download from
# anywhere else, nothing started as a service.
#
#   chromium.sh install   install chromium and a font if missing (needs root)
#   chromium.sh path      print the browser's path (fails when missing)
set -euo pipefail

log() { printf '[chromium] %s\n' "$*" >&2; }
die() { printf '[chromium] error: %s\n' "$*" >&2; exit 1; }

find_browser() {
  local b
  for b in "${SUNDIAL_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
    if [ -n "$b" ] && [ -x "$b" ]; then echo "$b"; return 0; fi
  done
  return 1
}

cmd_install() {
  if find_browser >/dev/null && fc-list 2>/dev/null | grep -qi dejavu; then return 0; fi
  [ "$(id -u)" = 0 ] || die "chromium is missing and installing it needs root: apt-get install --no-install-recommends chromium fonts-dejavu-core"
  log "installing Debian's chromium and fonts-dejavu-core"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null \
    || die "apt-get install chromium failed"
  find_browser >/dev/null || die "chromium installed but not found on /usr/bin"
}

cmd_path() { find_browser || die "chromium is not installed: run $0 install"; }

case "${1:-}" in
  install) cmd_install ;;
  path) cmd_path ;;
  *) echo "usage: $0 install|path" >&2; exit 2 ;;
esac
