#!/usr/bin/env bash
# Build the test stack's two images (Kafka in KRaft mode, PostgreSQL) locally from Debian's
# packages, with no image registry: debootstrap a Debian rootfs once, install a JRE or PostgreSQL
# into a copy with chroot + apt-get, add the devstack's Kafka jars, `podman import` the result.
# Cached: an image that already exists under its tag is not rebuilt (--force rebuilds).
# Needs root, podman, debootstrap (apt-get install -y podman runc debootstrap) and the devstack's
# jar cache (make up once, or SLOTFLOW_DEVSTACK_CACHE pointing at it).
# Prints the two image names, as tests/stack.py reads them:
#   SLOTFLOW_TEST_KAFKA_IMAGE=...  SLOTFLOW_TEST_POSTGRES_IMAGE=...
# --python also builds a Debian Python 3.11 base for deploy/docker/Dockerfile (PYTHON_IMAGE) and
# prints SLOTFLOW_TEST_PYTHON_IMAGE=... (deploy/containers/check-compose.sh uses it).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${SLOTFLOW_DEVSTACK_CACHE:-$REPO/.cache}"
WORK="${SLOTFLOW_CONTAINERS_CACHE:-$CACHE/containers}"
SUITE=bookworm
MIRROR="${SLOTFLOW_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
FORCE=0
WITH_PYTHON=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --python) WITH_PYTHON=1 ;;
    *) echo "build-images: unknown option $arg (--force, --python)" >&2; exit 2 ;;
  esac
done

KAFKA_VERSION="$(sed -n 's:.*<kafka\.version>\s*\([^<[:space:]]*\)\s*</kafka\.version>.*:\1:p' "$REPO/deploy/devstack/pom.xml")"
JARS="$CACHE/kafka-libs-$KAFKA_VERSION"
# The tag follows every input that changes the image's content.
INPUTS_DIGEST="$(cat "$0" "$HERE/kafka-entrypoint.sh" "$HERE/kafka-configs.sh" "$HERE/postgres-entrypoint.sh" \
  "$REPO/deploy/devstack/_kafka.py" "$REPO/deploy/devstack/log4j2.properties" | sha256sum | cut -c1-12)"
KAFKA_IMAGE="localhost/slotflow-test-kafka:$KAFKA_VERSION-$INPUTS_DIGEST"
POSTGRES_IMAGE="localhost/slotflow-test-postgres:15-$INPUTS_DIGEST"
PYTHON_IMAGE="localhost/slotflow-test-python:3.11-$INPUTS_DIGEST"

say() { echo "build-images: $*" >&2; }

for tool in podman debootstrap chroot; do
  command -v "$tool" >/dev/null || { say "$tool not found: apt-get install -y podman runc debootstrap"; exit 1; }
done
[[ $(id -u) == 0 ]] || { say "needs root (debootstrap, chroot)"; exit 1; }
# The devstack's jars, fetched with mvn the first time (the same cache `make up` fills).
[[ -f "$JARS/.complete.json" ]] || "$REPO/.venv/bin/python" "$REPO/deploy/devstack/devstack.py" fetch-kafka >/dev/null

mkdir -p "$WORK"

base_rootfs() {
  local base="$WORK/rootfs-$SUITE"
  if [[ ! -f "$base/.complete" ]]; then
    rm -rf "$base"
    say "debootstrap $SUITE into $base (once)"
    debootstrap --variant=minbase "$SUITE" "$base" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
      || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
    touch "$base/.complete"
  fi
  echo "$base"
}

# apt-get install into a copy of the base rootfs; /proc is mounted for the packages' scripts.
rootfs_with() {
  local name="$1"; shift
  local root="$WORK/rootfs-$name"
  rm -rf "$root"
  cp -a "$(base_rootfs)" "$root"
  rm -f "$root/.complete"
  mount -t proc proc "$root/proc"
  trap 'umount "'"$root"'/proc" 2>/dev/null || true' RETURN
  say "apt-get install $* into $root"
  chroot "$root" /bin/sh -c "export DEBIAN_FRONTEND=noninteractive; apt-get update -q && \
    apt-get install -y -q --no-install-recommends $* && apt-get clean && rm -rf /var/lib/apt/lists/*" \
    >"$WORK/$name-apt.log" 2>&1 || { tail -20 "$WORK/$name-apt.log" >&2; exit 1; }
  echo "$root"
}

import_rootfs() {
  local root="$1" image="$2"; shift 2
  say "podman import $image"
  tar --numeric-owner -C "$root" -cf - . | podman import -q "$@" - "$image" >/dev/null
  rm -rf "$root"
}

exists() { [[ $FORCE == 0 ]] && podman image exists "$1"; }

if ! exists "$KAFKA_IMAGE"; then
  root="$(rootfs_with kafka openjdk-17-jre-headless)"
  mkdir -p "$root/opt/kafka/libs" "$root/var/lib/kafka"
  cp "$JARS"/*.jar "$root/opt/kafka/libs/"
  cp "$REPO/deploy/devstack/log4j2.properties" "$root/opt/kafka/log4j2.properties"
  # The devstack's server.properties and java command line (deploy/devstack/_kafka.py), rendered
  # for the container's paths; the entrypoint only rewrites the listeners for the port it is given.
  (cd "$REPO/deploy/devstack" && "$REPO/.venv/bin/python" - "$root/opt/kafka" <<'PY'
import shlex
import sys
from pathlib import Path

from _config import Config
from _kafka import LOG4J2_CONFIG, _kafka_command, _server_properties

home = Path(sys.argv[1])
cfg = Config(state_dir=Path("/var/lib/kafka"), cache_dir=Path("/opt/kafka"), kafka_port=9092,
             controller_port=9093, pg_port=5432)
(home / "server.properties").write_text(_server_properties(cfg))
argv = _kafka_command(cfg, "java", Path("/opt/kafka/libs"))
argv = [a.replace(str(LOG4J2_CONFIG), "/opt/kafka/log4j2.properties") for a in argv]
argv[-1] = "/opt/kafka/server.properties"
(home / "kafka-command").write_text(shlex.join(argv) + "\n")
PY
  )
  install -m 0755 "$HERE/kafka-entrypoint.sh" "$root/usr/local/bin/kafka-entrypoint"
  # The official image's path for the one admin tool the broker's own jars carry, so compose.yaml's
  # healthcheck runs unchanged on either image.
  mkdir -p "$root/opt/kafka/bin"
  install -m 0755 "$HERE/kafka-configs.sh" "$root/opt/kafka/bin/kafka-configs.sh"
  import_rootfs "$root" "$KAFKA_IMAGE" \
    --change 'ENTRYPOINT ["/usr/local/bin/kafka-entrypoint"]' --change 'EXPOSE 9092'
fi

if ! exists "$POSTGRES_IMAGE"; then
  root="$(rootfs_with postgres postgresql-15)"
  install -m 0755 "$HERE/postgres-entrypoint.sh" "$root/usr/local/bin/postgres-entrypoint"
  import_rootfs "$root" "$POSTGRES_IMAGE" \
    --change 'ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]' --change 'EXPOSE 5432'
fi

if [[ $WITH_PYTHON == 1 ]] && ! exists "$PYTHON_IMAGE"; then
  # Debian bookworm's python3 is 3.11; the Dockerfile makes its own virtual environments.
  root="$(rootfs_with python python3 python3-venv ca-certificates)"
  import_rootfs "$root" "$PYTHON_IMAGE"
fi

echo "SLOTFLOW_TEST_KAFKA_IMAGE=$KAFKA_IMAGE"
if [[ $WITH_PYTHON == 1 ]]; then echo "SLOTFLOW_TEST_PYTHON_IMAGE=$PYTHON_IMAGE"; fi
echo "SLOTFLOW_TEST_POSTGRES_IMAGE=$POSTGRES_IMAGE"
