#!/usr/bin/env bash
# A throwaway Redis server for the session store's tests and local runs.
#
#   scripts/redis.sh [start] [PORT]   install redis-server if missing, start it on PORT
#                                     (default 6399, 127.0.0.1 only, no persistence) and wait
#                                     until PING answers; does nothing if one already answers
#   scripts/redis.sh stop [PORT]      shut that server down (no error if none is running)
#   scripts/redis.sh status [PORT]    exit 0 when a server answers PING on PORT
#
# Environment: REDIS_STATE_DIR (pid/log files, default /tmp/horizon-redis),
#              REDIS_WAIT_S (seconds to wait for PING, default 20).
set -euo pipefail

verb="${1:-start}"
case "$verb" in
  start|stop|status) shift || true ;;
  [0-9]*) verb=start ;;
  *) echo "usage: $0 [start|stop|status] [PORT]" >&2; exit 2 ;;
esac
port="${1:-6399}"
state_dir="${REDIS_STATE_DIR:-/tmp/horizon-redis}"
wait_s="${REDIS_WAIT_S:-20}"
pidfile="$state_dir/redis-$port.pid"
logfile="$state_dir/redis-$port.log"

log() { echo "redis.sh: $*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
  else log "need root (or passwordless sudo) to run: $*"; return 1
  fi
}

pong() {
  command -v redis-cli >/dev/null 2>&1 || return 1
  [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = "PONG" ]
}

install_redis() {
  command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || { log "redis-server missing and apt-get unavailable"; return 1; }
  log "installing redis-server with apt-get"
  as_root apt-get update -qq
  # The package's service start fails harmlessly in containers without an init system.
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  command -v redis-server >/dev/null 2>&1
}

start() {
  if pong; then log "already answering on port $port"; return 0; fi
  install_redis
  mkdir -p "$state_dir"
  # No RDB snapshots, no AOF: test and session data are disposable.
  redis-server --port "$port" --bind 127.0.0.1 --protected-mode yes \
    --save "" --appendonly no --daemonize yes \
    --pidfile "$pidfile" --logfile "$logfile" --dir "$state_dir"
  local deadline=$((SECONDS + wait_s))
  until pong; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "no PING answer on port $port after ${wait_s}s; log: $logfile"
      tail -n 20 "$logfile" >&2 2>/dev/null || true
      return 1
    fi
    sleep 0.1
  done
  log "redis-server answering on 127.0.0.1:$port"
}

stop() {
  if pong; then
    redis-cli -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 || true
  fi
  local deadline=$((SECONDS + wait_s))
  while pong; do
    [ "$SECONDS" -ge "$deadline" ] && { log "server on port $port did not stop"; return 1; }
    sleep 0.1
  done
  rm -f "$pidfile"
  log "stopped (port $port)"
}

case "$verb" in
  start) start ;;
  stop) stop ;;
  status) pong ;;
esac
