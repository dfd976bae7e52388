#!/usr/bin/env bash
# helm and kubeconform for `make check-helm`, built once from the Go module proxy into the devstack
# cache, as compose-tool.sh builds docker compose: named versions, no binary downloaded from a
# release page. Prints the binary's path.
#   helm-tool.sh helm          helm.sh/helm/v4/cmd/helm
#   helm-tool.sh kubeconform   github.com/yannh/kubeconform/cmd/kubeconform
# Built by go-tool.sh, statically (CGO_ENABLED=0).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"

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
CGO_ENABLED=0 exec "$HERE/go-tool.sh" "$1" "$MODULE" "$VERSION" "$PACKAGE" "$LDFLAGS"
