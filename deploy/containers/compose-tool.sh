#!/usr/bin/env bash
# The Docker Compose CLI (github.com/docker/compose), built once from the Go module proxy into the
# devstack cache, for machines with podman and no Docker: it talks to podman's Docker-compatible
# socket (DOCKER_HOST from engine.sh start). Prints the binary's path.
# Built inside the module's own source tree so its go.mod (replace/exclude lines) holds as written.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${SLOTFLOW_DEVSTACK_CACHE:-$REPO/.cache}"
MODULE=github.com/docker/compose/v5
VERSION=v5.6.0
OUT="$CACHE/tools/docker-compose-$VERSION"

say() { echo "compose-tool: $*" >&2; }

if [[ ! -x "$OUT" ]]; then
  command -v go >/dev/null || { say "go not found (Go 1.26+ is needed to build docker compose $VERSION)"; exit 1; }
  mkdir -p "$CACHE/tools"
  say "building docker compose $VERSION from the Go module proxy (once, about 2 minutes)"
  src="$(cd "$CACHE/tools" && GOFLAGS=-mod=mod go mod download -json "$MODULE@$VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$src" ]] || { say "go mod download $MODULE@$VERSION gave no source directory"; exit 1; }
  build="$(mktemp -d)"
  trap 'rm -rf "$build"' EXIT
  cp -r "$src/." "$build/"
  chmod -R u+w "$build"
  (cd "$build" && go build -trimpath -o "$OUT.tmp" ./cmd) >&2
  mv "$OUT.tmp" "$OUT"
fi
echo "$OUT"
