#!/usr/bin/env bash
# promtool (Prometheus's rule checker) for the alert rules' tests: installs Debian's prometheus
# package when promtool is missing (its services do not start in a container without an init
# system; nothing listens afterwards). tests/unit/observability/test_alert_rules.py runs
# `promtool test rules cluster/monitoring/alerts_test.yml` with it.
#
#   scripts/promtool.sh      exit 0 when promtool is on PATH (installed now or before)
set -euo pipefail

log() { echo "promtool.sh: $*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
  else log "need root (or passwordless sudo) to run: $*"; return 1
  fi
}

command -v promtool >/dev/null 2>&1 && exit 0
command -v apt-get >/dev/null 2>&1 || { log "promtool missing and apt-get unavailable"; exit 1; }
log "installing promtool (Debian's prometheus package) with apt-get"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v promtool >/dev/null 2>&1
