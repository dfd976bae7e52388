#!/usr/bin/env bash
# Checks compose.yaml and deploy/docker/Dockerfile where no Docker runs, on podman: builds the
# slotflow image from the Dockerfile on a locally built Debian Python base, brings the whole suite
# up with the Docker Compose CLI on podman's socket (`--profile app`, Kafka and PostgreSQL from the
# images build-images.sh makes), waits until every container is healthy or running, then drives it
# through the api (deploy/containers/compose_smoke.py): a payout schedule fires and completes, the
# order saga completes, and a declined card compensates. Everything is removed afterwards.
# Needs root, podman, runc, debootstrap, go (`make check-compose` installs the Debian packages).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
cd "$REPO"
STATE="${SLOTFLOW_DEVSTACK_DIR:-$REPO/.devstack}/containers"
mkdir -p "$STATE"
PROJECT=slotflow-compose-check

say() { echo "check-compose: $*" >&2; }
# runc, cgroupfs and limits this machine needs, for podman build as for the engine (engine.sh).
export CONTAINERS_CONF="$HERE/containers.conf"

# Host ports below the kernel's ephemeral range, away from the devstack's defaults.
free_port() {
  "$REPO/.venv/bin/python" - "$1" <<'PY'
import socket
import sys

for port in range(int(sys.argv[1]), 32768):
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port)
    break
PY
}
export SLOTFLOW_COMPOSE_KAFKA_PORT="${SLOTFLOW_COMPOSE_KAFKA_PORT:-$(free_port 26092)}"
export SLOTFLOW_COMPOSE_PG_PORT="${SLOTFLOW_COMPOSE_PG_PORT:-$(free_port 26432)}"
export SLOTFLOW_COMPOSE_API_PORT="${SLOTFLOW_COMPOSE_API_PORT:-$(free_port 26080)}"

# An engine already serving (say, a testcontainers session) is used and left running.
engine_was_up=0
if [[ -f "$STATE/podman.pid" ]] && kill -0 "$(cat "$STATE/podman.pid")" 2>/dev/null; then engine_was_up=1; fi
eval "$("$HERE/engine.sh" start)"
# Taken first and exported after: `export $(...)` alone would hide a failed build.
images="$("$HERE/build-images.sh" --python)"
# shellcheck disable=SC2086 # the script prints KEY=VALUE words
export $images
COMPOSE="$("$HERE/compose-tool.sh")"
export SLOTFLOW_KAFKA_IMAGE="$SLOTFLOW_TEST_KAFKA_IMAGE"
export SLOTFLOW_POSTGRES_IMAGE="$SLOTFLOW_TEST_POSTGRES_IMAGE"
export SLOTFLOW_PYTHON_IMAGE="$SLOTFLOW_TEST_PYTHON_IMAGE"
export SLOTFLOW_IMAGE=localhost/slotflow:compose-check
# The api runs with authentication on; this run's admin token exists only for the run.
SLOTFLOW_API_BOOTSTRAP_TOKEN="sft_$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export SLOTFLOW_API_BOOTSTRAP_TOKEN
# The orchestrators' query listener token, shared with the api, likewise for the run only.
SLOTFLOW_QUERY_TOKEN="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export SLOTFLOW_QUERY_TOKEN
compose() { "$COMPOSE" -p "$PROJECT" --profile app "$@"; }

healthchecks_pid=
finish() {
  rc=$?
  if [[ -n $healthchecks_pid ]]; then kill "$healthchecks_pid" 2>/dev/null || true; fi
  compose logs --no-color >"$STATE/compose-check.log" 2>&1 || true
  compose down --volumes --timeout 5 >/dev/null 2>&1 || true
  if [[ $engine_was_up == 0 ]]; then "$HERE/engine.sh" stop; fi
  if [[ $rc != 0 ]]; then say "failed; every container's log is in $STATE/compose-check.log"; fi
  exit $rc
}
trap finish EXIT

compose config --quiet
say "compose.yaml parses; building $SLOTFLOW_IMAGE from deploy/docker/Dockerfile"
# pip inside the build reaches the package index the way this machine's pip does (its CA bundle,
# when set), over the host's network; the bundle is not kept in the image.
build_args=(--build-arg "PYTHON_IMAGE=$SLOTFLOW_PYTHON_IMAGE" --build-arg "VERSION=$(cat VERSION)"
  --build-arg "REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)")
if [[ -n "${PIP_CERT:-}" && -f "$PIP_CERT" ]]; then
  build_args+=(--build-arg "PIP_CERT=$PIP_CERT" --volume "$PIP_CERT:$PIP_CERT:ro")
fi
started=$(date +%s)
podman build --quiet --network host -f deploy/docker/Dockerfile "${build_args[@]}" \
  -t "$SLOTFLOW_IMAGE" . >"$STATE/compose-check-build.log" 2>&1 \
  || { tail -30 "$STATE/compose-check-build.log" >&2; exit 1; }
say "image built in $(($(date +%s) - started)) s; runs as $(podman image inspect --format '{{.Config.User}}' "$SLOTFLOW_IMAGE"); $(podman image inspect --format '{{.Size}}' "$SLOTFLOW_IMAGE" | awk '{printf "%.0f MB", $1 / 1e6}')"

# podman runs a container's healthcheck from a systemd timer; where there is no systemd nothing
# runs it and `--wait` would see "starting" forever. This loop is that timer: every few seconds it
# runs the check of each of the project's containers that has one and is not healthy yet.
run_healthchecks() {
  while sleep 3; do
    podman ps --filter "label=com.docker.compose.project=$PROJECT" --filter health=starting \
      --filter health=unhealthy --format '{{.ID}}' 2>/dev/null |
      while read -r id; do podman healthcheck run "$id" >/dev/null 2>&1 || true; done
  done
}
run_healthchecks &
healthchecks_pid=$!

started=$(date +%s)
compose up --detach --no-build --wait --wait-timeout 300
kill "$healthchecks_pid" 2>/dev/null || true
say "every service up in $(($(date +%s) - started)) s:"
compose ps --format 'table {{.Service}}\t{{.State}}\t{{.Status}}' >&2

SLOTFLOW_TOKEN="$SLOTFLOW_API_BOOTSTRAP_TOKEN" "$REPO/.venv/bin/python" "$HERE/compose_smoke.py" \
  --api "http://127.0.0.1:$SLOTFLOW_COMPOSE_API_PORT" \
  --pg "postgresql://slotflow:slotflow@127.0.0.1:$SLOTFLOW_COMPOSE_PG_PORT/slotflow"
