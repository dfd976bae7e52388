#!/usr/bin/env bash
# helm and kubeconform for `make check-helm`, built once from the Go module proxy into the devstack
# cache, as compose-tool.sh builds docker compose: named versions, no binary downloaded from a
# release page. Prints the binary's path.
#   helm-tool.sh helm          helm.sh/helm/v4/cmd/helm
#   helm-tool.sh kubeconform   github.com/yannh/kubeconform/cmd/kubeconform
# Each is built inside its module's own source tree, so its go.mod (replace/exclude lines) holds as
# written (`go install module@version` refuses a module with replace lines).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${SLOTFLOW_DEVSTACK_CACHE:-$REPO/.cache}"

say() { echo "helm-tool: $*" >&2; }

case "${1:-}" in
  helm)
    MODULE=helm.sh/helm/v4
    VERSION=v4.3.2
    PACKAGE=./cmd/helm
    # `helm version` prints the version it was built as (helm's Makefile sets the same variable).
    LDFLAGS="-X helm.sh/helm/v4/internal/version.version=$VERSION"
    ;;
  kubeconform)
    MODULE=github.com/yannh/kubeconform
    VERSION=v0.7.0
    PACKAGE=./cmd/kubeconform
    LDFLAGS=""
    ;;
  *)
    say "usage: helm-tool.sh helm|kubeconform"
    exit 2
    ;;
esac
OUT="$CACHE/tools/$1-$VERSION"

if [[ ! -x "$OUT" ]]; then
  command -v go >/dev/null || { say "go not found (needed to build $1 $VERSION)"; exit 1; }
  mkdir -p "$CACHE/tools"
  say "building $1 $VERSION from the Go module proxy (once)"
  src="$(cd "$CACHE/tools" && GOFLAGS=-mod=mod go mod download -json "$MODULE@$VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$src" ]] || { say "go mod download $MODULE@$VERSION gave no source directory"; exit 1; }
  build="$(mktemp -d)"
  trap 'rm -rf "$build"' EXIT
  cp -r "$src/." "$build/"
  chmod -R u+w "$build"
  (cd "$build" && CGO_ENABLED=0 go build -trimpath -ldflags "$LDFLAGS" -o "$OUT.tmp" "$PACKAGE") >&2
  mv "$OUT.tmp" "$OUT"
fi
echo "$OUT"
