#!/usr/bin/env bash
# A Docker-compatible engine for the testcontainers test stack where no Docker runs: podman's
# API service on a unix socket, with deploy/containers/containers.conf (runc, cgroupfs, limits).
#   eval "$(deploy/containers/engine.sh start)"   # prints export DOCKER_HOST=unix://...
#   deploy/containers/engine.sh stop
# State (socket, pid, log) in $SLOTFLOW_DEVSTACK_DIR/containers (default .devstack/containers).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
STATE="${SLOTFLOW_DEVSTACK_DIR:-$REPO/.devstack}/containers"
case "$STATE" in /*) ;; *) STATE="$REPO/$STATE" ;; esac
SOCKET="$STATE/podman.sock"
PIDFILE="$STATE/podman.pid"
export CONTAINERS_CONF="$HERE/containers.conf"

running() { [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

case "${1:-}" in
  start)
    command -v podman >/dev/null || { echo "podman not found: apt-get install -y podman runc" >&2; exit 1; }
    mkdir -p "$STATE"
    if ! running; then
      rm -f "$SOCKET"
      # --time=0: the service stays up until stopped, not only while a client is connected.
      nohup podman system service --time=0 "unix://$SOCKET" >"$STATE/podman.log" 2>&1 &
      echo $! >"$PIDFILE"
      for _ in $(seq 100); do [[ -S "$SOCKET" ]] && break; sleep 0.1; done
      [[ -S "$SOCKET" ]] || { echo "podman system service did not open $SOCKET:" >&2; tail "$STATE/podman.log" >&2; exit 1; }
    fi
    echo "export DOCKER_HOST=unix://$SOCKET"
    # No reaper: its image (testcontainers/ryuk) would come from a registry; the session removes
    # its containers itself.
    echo "export TESTCONTAINERS_RYUK_DISABLED=true"
    # The engine runs on this machine, so mapped ports are on its loopback, even where this
    # machine itself looks like a container (/.dockerenv) and testcontainers would guess a gateway.
    echo "export TESTCONTAINERS_CONNECTION_MODE=docker_host"
    ;;
  stop)
    if running; then kill "$(cat "$PIDFILE")"; fi
    rm -f "$PIDFILE" "$SOCKET"
    ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
