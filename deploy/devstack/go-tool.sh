#!/usr/bin/env bash
# Builds a Go command once from the Go module proxy into the devstack cache and prints the binary's
# path: helm and kubeconform (helm-tool.sh) and docker compose (deploy/containers/compose-tool.sh).
# Named versions, no binary downloaded from a release page.
#   go-tool.sh NAME MODULE VERSION PACKAGE [LDFLAGS]
# Built inside the module's own source tree, so its go.mod (replace/exclude lines) holds as written
# (`go install module@version` refuses a module with replace lines). CGO_ENABLED and the other Go
# variables pass through from the caller.
set -euo pipefail

[[ $# -ge 4 ]] || { echo "usage: go-tool.sh NAME MODULE VERSION PACKAGE [LDFLAGS]" >&2; exit 2; }
NAME="$1" MODULE="$2" VERSION="$3" PACKAGE="$4" LDFLAGS="${5:-}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${SLOTFLOW_DEVSTACK_CACHE:-$REPO/.cache}"
OUT="$CACHE/tools/$NAME-$VERSION"

say() { echo "go-tool: $*" >&2; }

if [[ ! -x "$OUT" ]]; then
  command -v go >/dev/null || { say "go not found (Go 1.26+ is needed to build $NAME $VERSION)"; exit 1; }
  mkdir -p "$CACHE/tools"
  say "building $NAME $VERSION from the Go module proxy (once)"
  src="$(cd "$CACHE/tools" && GOFLAGS=-mod=mod go mod download -json "$MODULE@$VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$src" ]] || { say "go mod download $MODULE@$VERSION gave no source directory"; exit 1; }
  build="$(mktemp -d)"
  trap 'rm -rf "$build"' EXIT
  cp -r "$src/." "$build/"
  chmod -R u+w "$build"
  (cd "$build" && go build -trimpath -ldflags "$LDFLAGS" -o "$OUT.tmp" "$PACKAGE") >&2
  mv "$OUT.tmp" "$OUT"
fi
echo "$OUT"
