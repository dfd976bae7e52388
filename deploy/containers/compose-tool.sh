#!/usr/bin/env bash
# The Docker Compose CLI (github.com/docker/compose), built once from the Go module proxy into the
# devstack cache, for machines with podman and no Docker: it talks to podman's Docker-compatible
# socket (DOCKER_HOST from engine.sh start). Prints the binary's path.
# Built by deploy/devstack/go-tool.sh (once, about 2 minutes).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
MODULE=github.com/docker/compose/v5
VERSION=v5.6.0

exec "$REPO/deploy/devstack/go-tool.sh" docker-compose "$MODULE" "$VERSION" ./cmd
