#!/usr/bin/env bash
# Build the slotflow image (deploy/docker/Dockerfile) with its OCI labels filled in: the version
# from VERSION, the revision from git, the source from SLOTFLOW_SOURCE (the repository's public
# address; the labels say `unknown` without it). Any extra arguments go to the build (--build-arg
# PYTHON_IMAGE=..., --network host, ...).
#   deploy/docker/build.sh IMAGE[:TAG] [BUILD ARGS...]    (ENGINE=podman|docker, default: podman if found)
# Tags IMAGE with the version too, so a release pushes IMAGE:VERSION (docs/deploy.md, "The image").
set -euo pipefail
cd "$(dirname "$0")/../.."
image="${1:?usage: deploy/docker/build.sh IMAGE[:TAG] [BUILD ARGS...]}"
shift
engine="${ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}"
version="$(cat VERSION)"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [[ $revision != unknown ]] && [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then
  revision="$revision-dirty"
fi
"$engine" build -f deploy/docker/Dockerfile \
  --build-arg "SLOTFLOW_VERSION=$version" \
  --build-arg "SLOTFLOW_REVISION=$revision" \
  --build-arg "SLOTFLOW_SOURCE=${SLOTFLOW_SOURCE:-unknown}" \
  -t "$image" -t "${image%:*}:$version" "$@" .
