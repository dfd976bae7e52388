#!/usr/bin/env bash
# Build the Python base of deploy/docker/Dockerfile (PYTHON_IMAGE) locally, with no image registry,
# from exactly the Debian packages in deploy/containers/python-base.lock: debootstrap Debian once
# (the same cached rootfs as build-images.sh), install every locked package at its locked version,
# then refuse the result unless the rootfs holds the lock's packages and nothing else, and its
# python3 is the lock's Python version. A registry image would be pinned by digest; this one is
# pinned by what goes into it, and its tag carries the lock's digest.
#   build-python-base.sh                 build (cached: an existing image under its tag is kept)
#   build-python-base.sh --force         rebuild
#   build-python-base.sh --update-lock   install the newest python3, python3-venv, ca-certificates
#                                        of the suite and write what came into the lock
# Needs root, podman, debootstrap (apt-get install -y podman runc debootstrap).
# Prints SLOTFLOW_TEST_PYTHON_IMAGE=... (deploy/containers/check-compose.sh reads it).
#
# Debian's mirror keeps only the current version of a package: after a point release the lock
# fails to install, naming the package; run --update-lock, review the diff, commit it.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${SLOTFLOW_DEVSTACK_CACHE:-$REPO/.cache}"
WORK="${SLOTFLOW_CONTAINERS_CACHE:-$CACHE/containers}"
LOCK="$HERE/python-base.lock"
SUITE=bookworm
MIRROR="${SLOTFLOW_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# What the Dockerfile needs of its base: an interpreter, its venv module, the CAs pip trusts.
WANTED=(python3 python3-venv ca-certificates)
FORCE=0
UPDATE=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --update-lock) UPDATE=1; FORCE=1 ;;
    *) echo "build-python-base: unknown option $arg (--force, --update-lock)" >&2; exit 2 ;;
  esac
done

say() { echo "build-python-base: $*" >&2; }

for tool in podman debootstrap chroot; do
  command -v "$tool" >/dev/null || { say "$tool not found: apt-get install -y podman runc debootstrap"; exit 1; }
done
[[ $(id -u) == 0 ]] || { say "needs root (debootstrap, chroot)"; exit 1; }

locked_python() { sed -n 's/^# python \([0-9.]*\)$/\1/p' "$LOCK"; }
locked_packages() { grep -v '^#' "$LOCK" | grep -v '^$'; }

if [[ $UPDATE == 0 ]]; then
  [[ -f "$LOCK" ]] || { say "no $LOCK: run --update-lock"; exit 1; }
  # The tag follows everything that changes the image: this script and the lock.
  IMAGE="localhost/slotflow-python:$(locked_python)-$(cat "$0" "$LOCK" | sha256sum | cut -c1-12)"
  if [[ $FORCE == 0 ]] && podman image exists "$IMAGE"; then
    echo "SLOTFLOW_TEST_PYTHON_IMAGE=$IMAGE"
    exit 0
  fi
fi

mkdir -p "$WORK"
base="$WORK/rootfs-$SUITE"
if [[ ! -f "$base/.complete" ]]; then
  rm -rf "$base"
  say "debootstrap $SUITE into $base (once)"
  debootstrap --variant=minbase "$SUITE" "$base" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
  touch "$base/.complete"
fi

root="$WORK/rootfs-python"
rm -rf "$root"
cp -a "$base" "$root"
rm -f "$root/.complete"
mount -t proc proc "$root/proc"
trap 'umount "$root/proc" 2>/dev/null || true; rm -rf "$root"' EXIT

if [[ $UPDATE == 1 ]]; then
  install=("${WANTED[@]}")
else
  # Every locked package at its version: the ones minbase already has at that version are no-ops,
  # one that moved is brought to the lock's version (or fails, naming it).
  mapfile -t install < <(locked_packages)
fi
say "apt-get install ${#install[@]} packages into $root"
chroot "$root" /bin/sh -c "export DEBIAN_FRONTEND=noninteractive; apt-get update -q && \
  apt-get install -y -q --no-install-recommends --allow-downgrades ${install[*]} && apt-get clean && \
  rm -rf /var/lib/apt/lists/*" >"$WORK/python-apt.log" 2>&1 \
  || { tail -20 "$WORK/python-apt.log" >&2; exit 1; }

installed="$(chroot "$root" dpkg-query -W -f '${Package}=${Version}\n' | sort)"
python="$(chroot "$root" python3 -c 'import platform; print(platform.python_version())')"
if [[ $UPDATE == 1 ]]; then
  {
    echo "# The Debian packages of the Python base (deploy/containers/build-python-base.sh), exactly:"
    echo "# the build fails unless the image holds these and nothing else. Written by"
    echo "# build-python-base.sh --update-lock from Debian $SUITE; do not edit by hand."
    echo "# python $python"
    echo "$installed"
  } >"$LOCK"
  say "wrote $LOCK (python $python, $(echo "$installed" | wc -l) packages); rerun without --update-lock"
  exit 0
fi
if [[ "$installed" != "$(locked_packages | sort)" ]]; then
  say "the rootfs is not the lock (< lock, > installed):"
  diff <(locked_packages | sort) <(echo "$installed") >&2 || true
  exit 1
fi
if [[ "$python" != "$(locked_python)" ]]; then
  say "python3 is $python, the lock says $(locked_python)"
  exit 1
fi

umount "$root/proc"
say "podman import $IMAGE"
tar --numeric-owner -C "$root" -cf - . | podman import -q - "$IMAGE" >/dev/null
echo "SLOTFLOW_TEST_PYTHON_IMAGE=$IMAGE"
