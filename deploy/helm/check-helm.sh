#!/usr/bin/env bash
# `make check-helm`: the Helm chart (deploy/helm/slotflow) linted and rendered with its default
# values and with each example values file, every render validated by kubeconform (strict) against
# the Kubernetes 1.32 and 1.37 schemas and checked by the manifests' own rules
# (tests/unit/deploy/test_kubernetes.py, pointed at the render); a changed setting or secret must
# change the pods' checksums; deploy/kubernetes must be what the chart renders
# (deploy/helm/build_kubernetes.py --check). helm and kubeconform are built once from the Go module
# proxy (deploy/devstack/helm-tool.sh), the schemas come from .venv (deploy/helm/kube_schemas.py):
# nothing is fetched from anywhere else.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON="${PYTHON:-.venv/bin/python}"
CHART=deploy/helm/slotflow
KUBERNETES_VERSIONS=(1.32 1.37)
# The Prometheus Operator's kinds have no schema offline (test_monitoring.py checks them against
# the CRDs' models); a kustomization is no resource.
SKIP_KINDS=Kustomization,PodMonitor,PrometheusRule

say() { echo "check-helm: $*" >&2; }

helm="$(deploy/devstack/helm-tool.sh helm)"
kubeconform="$(deploy/devstack/helm-tool.sh kubeconform)"
schemas="$("$PYTHON" deploy/helm/kube_schemas.py .cache/kubernetes-schemas "${KUBERNETES_VERSIONS[@]}")"
renders="$(mktemp -d)"
trap 'rm -rf "$renders"' EXIT

# name | values files (comma-separated, relative to deploy/helm) | Secrets the render only names
CASES=(
  "default||"
  "kubernetes|kubernetes-values.yaml|"
  "secured|examples/secured.yaml|examples/secured-secrets.yaml"
  "dev|examples/dev.yaml|"
)

for case in "${CASES[@]}"; do
  IFS='|' read -r name values secrets <<<"$case"
  args=()
  IFS=',' read -ra files <<<"$values"
  for file in "${files[@]}"; do args+=(--values "deploy/helm/$file"); done
  say "$name: helm lint --strict"
  "$helm" lint --strict --quiet "$CHART" "${args[@]}" >&2
  say "$name: render"
  render_args=(--helm "$helm" --render-to "$renders/$name" "${args[@]}")
  [[ -n "$secrets" ]] && render_args+=(--secrets "deploy/helm/$secrets")
  "$PYTHON" deploy/helm/build_kubernetes.py "${render_args[@]}"
  for version in "${KUBERNETES_VERSIONS[@]}"; do
    say "$name: kubeconform -strict, Kubernetes $version"
    "$kubeconform" -strict -summary -kubernetes-version "$version.0" -schema-location "$schemas" \
      -skip "$SKIP_KINDS" "$renders/$name" >&2
  done
  say "$name: the manifests' rules (tests/unit/deploy/test_kubernetes.py)"
  SLOTFLOW_KUBERNETES_MANIFESTS="$renders/$name" "$PYTHON" -m pytest -q -p no:cacheprovider \
    -m unit tests/unit/deploy/test_kubernetes.py >&2
done

# Kubernetes restarts nothing when a ConfigMap or Secret changes: the checksums in each pod
# template must, so `helm upgrade` rolls exactly the pods whose settings changed.
checksums() {  # the pods' checksum annotations of a render with these --set values
  "$helm" template slotflow "$CHART" "$@" | grep -E '^\s+checksum/' | sort | uniq -c
}
say "checksums: a setting rolls every service, a service's secret that service alone"
base="$(checksums)"
config="$(checksums --set config.SLOTFLOW_LOG_KAFKA_LEVEL=ERROR)"
secret="$(checksums --set services.claimer.secretEnv.SLOTFLOW_PG_PASSWORD=rotated)"
changed() { diff <(echo "$1") <(echo "$2") | grep -c '^>' || true; }
[[ "$(awk "/checksum\\/config/ {print \$1}" <<<"$base")" -eq 6 ]] || { say "each of the six Deployments should carry the same checksum/config"; exit 1; }
[[ "$(changed "$base" "$config")" -eq 1 ]] || { say "a changed setting did not change checksum/config"; exit 1; }
[[ "$(changed "$base" "$secret")" -eq 1 ]] || { say "a changed claimer secret should change the claimer's checksum/secret alone"; exit 1; }

say "deploy/kubernetes is the chart's render"
"$PYTHON" deploy/helm/build_kubernetes.py --helm "$helm" --check
say "ok"
