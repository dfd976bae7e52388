"""deploy/kubernetes, written from the Helm chart: the chart is the one source of the manifests.

    python3 deploy/helm/build_kubernetes.py --helm HELM            # write them
    python3 deploy/helm/build_kubernetes.py --helm HELM --check    # exit 1 naming each file out of date
    python3 deploy/helm/build_kubernetes.py --helm HELM --render-to DIR [-f VALUES ...] [--secrets FILE]

Renders `deploy/helm/slotflow` with `helm template`, its default values and
`deploy/helm/kubernetes-values.yaml` (plain manifests: no Helm hooks, labels or checksums; the
Namespace; the monitoring resources; the TLS Secret's placeholder), and writes one file per template
into `deploy/kubernetes` (`secrets.yaml` as `secrets.example.yaml`, left out of the kustomization),
`kustomization.yaml` listing them with the image, and `monitoring/kustomization.yaml`. The
templates' comments pass through `helm template`, so the files read as the chart does. It also holds
the chart's `version` and `appVersion` to the repository's `VERSION`.

`--render-to` writes the same layout for any values files (`make check-helm` checks each render with
the manifests' rules, tests/unit/deploy/test_kubernetes.py); `--secrets` adds Secrets the render
only names (existingSecret) to its secrets.example.yaml.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHART = HERE / "slotflow"
CHART_YAML = CHART / "Chart.yaml"
KUBERNETES_VALUES = HERE / "kubernetes-values.yaml"
MANIFESTS = ROOT / "deploy" / "kubernetes"
VERSION = ROOT / "VERSION"
#: The release and namespace deploy/kubernetes is rendered for: resource names start with the
#: release ("slotflow-ticker"), and the kustomization sets the namespace.
RELEASE = "slotflow"
NAMESPACE = "slotflow"
#: The template of the Secrets, written as placeholders that no kustomization applies.
SECRETS_TEMPLATE = "secrets.yaml"
SECRETS_EXAMPLE = "secrets.example.yaml"
MONITORING = "monitoring"
#: The order of a file's documents: its workload first, what belongs to it after (`helm template`
#: orders every document by kind over the whole chart).
KIND_ORDER = [
    "Namespace",
    "ConfigMap",
    "Secret",
    "Job",
    "Deployment",
    "Service",
    "PodDisruptionBudget",
    "NetworkPolicy",
    "PodMonitor",
    "PrometheusRule",
]
#: The order of the kustomization's resources (any other file after them, by name).
RESOURCE_ORDER = [
    "namespace.yaml",
    "config.yaml",
    "topics-job.yaml",
    "ticker.yaml",
    "claimer.yaml",
    "orchestrator.yaml",
    "dlq.yaml",
    "stats.yaml",
    "api.yaml",
    "networkpolicy.yaml",
]
SOURCE = re.compile(r"^# Source: [^/]+/templates/(?P<path>.+)$")
DOCUMENT_SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)

KUSTOMIZATION_HEADER = """\
# slotflow on an existing Kafka and PostgreSQL (docs/deploy.md), without Helm:
#   kubectl apply -k deploy/kubernetes
# Every file here is the Helm chart (deploy/helm/slotflow) rendered by deploy/helm/build_kubernetes.py:
# change the chart or its values and run the script; `make check-helm` fails on a file that differs.
# The Secrets are not listed here on purpose: secrets.example.yaml holds placeholders, and applying
# it on an upgrade would overwrite the real credentials. Create them once (docs/deploy.md).
# One image for every service (deploy/docker/Dockerfile, or a derived image with your handler and
# workflow modules): change it here (`images:`), not in each Deployment.
"""
MONITORING_KUSTOMIZATION_HEADER = """\
# Monitoring for slotflow where the Prometheus Operator runs (docs/deploy.md, "Monitoring"):
#   kubectl apply -k deploy/kubernetes/monitoring
# Kept out of deploy/kubernetes/kustomization.yaml: a cluster without the operator's CRDs would
# refuse these kinds and with them the whole apply. The dashboards are deploy/monitoring/dashboards.
# Rendered from deploy/helm/slotflow by deploy/helm/build_kubernetes.py.
"""


class RenderError(Exception):
    """`helm template` failed, or printed something this script cannot file."""


def helm_template(helm: str, values: list[Path], sets: list[str] | None = None) -> str:
    """The chart rendered by `helm template` with ``values`` (after the chart's defaults)."""
    command = [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for path in values:
        command += ["--values", str(path)]
    for assignment in sets or []:
        command += ["--set", assignment]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RenderError(f"{' '.join(command)} failed:\n{done.stderr}")
    return done.stdout


def split(rendered: str) -> dict[str, list[str]]:
    """The documents of `helm template`'s output by the template that wrote them (its path under
    templates/), each without its `# Source:` line and trailing blanks, in kind order."""
    by_template: dict[str, list[tuple[int, str]]] = {}
    for chunk in DOCUMENT_SEPARATOR.split(rendered):
        lines = [line.rstrip() for line in chunk.strip("\n").splitlines()]
        if not any(lines):
            continue
        match = SOURCE.match(lines[0])
        if match is None:
            raise RenderError(f"a document without its '# Source:' line: {lines[0]!r}")
        body = "\n".join(lines[1:]).strip("\n") + "\n"
        parsed = yaml.safe_load(body)
        if not isinstance(parsed, dict) or "kind" not in parsed:
            raise RenderError(f"{match['path']}: a document that is no resource:\n{body}")
        kind = str(parsed["kind"])
        rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
        by_template.setdefault(match["path"], []).append((rank, body))
    return {
        path: [body for _, body in sorted(docs, key=lambda d: d[0])] for path, docs in by_template.items()
    }


def _file_name(template: str) -> str:
    return SECRETS_EXAMPLE if template == SECRETS_TEMPLATE else template


def _ordered(names: list[str]) -> list[str]:
    known = [n for n in RESOURCE_ORDER if n in names]
    return known + sorted(n for n in names if n not in RESOURCE_ORDER)


def _images(documents: list[str]) -> list[str]:
    """The images the workloads run, without their tags."""
    images = set()
    for body in documents:
        resource = yaml.safe_load(body)
        if resource["kind"] in ("Deployment", "Job"):
            for container in resource["spec"]["template"]["spec"]["containers"]:
                name, _, tag = container["image"].rpartition(":")
                images.add(name if name and "/" not in tag else container["image"])
    return sorted(images)


def tree(rendered: str, extra_secrets: str = "") -> dict[str, str]:
    """Every file of a render's directory (relative path: content): one per template, and the
    kustomizations that list them."""
    files: dict[str, str] = {}
    documents = split(rendered)
    if extra_secrets:
        documents.setdefault(SECRETS_TEMPLATE, []).extend(
            doc.strip("\n") + "\n" for doc in DOCUMENT_SEPARATOR.split(extra_secrets) if doc.strip()
        )
    for template, docs in documents.items():
        header = f"# Generated by deploy/helm/build_kubernetes.py from deploy/helm/slotflow/templates/{template}.\n"
        files[_file_name(template)] = header + "---\n".join(docs)
    top = [name for name in files if "/" not in name and name != SECRETS_EXAMPLE]
    workloads = [doc for name in top for doc in documents[name]]
    kustomization: dict[str, object] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": NAMESPACE,
        "resources": _ordered(top),
        "images": [
            {"name": image, "newName": image, "newTag": VERSION.read_text().strip()}
            for image in _images(workloads)
        ],
    }
    files["kustomization.yaml"] = KUSTOMIZATION_HEADER + yaml.safe_dump(kustomization, sort_keys=False)
    monitoring = sorted(name.split("/", 1)[1] for name in files if name.startswith(f"{MONITORING}/"))
    if monitoring:
        files[f"{MONITORING}/kustomization.yaml"] = MONITORING_KUSTOMIZATION_HEADER + yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": NAMESPACE,
                "resources": monitoring,
            },
            sort_keys=False,
        )
    return files


def chart_yaml(version: str) -> str:
    """Chart.yaml with `version` and `appVersion` set to ``version``."""
    text = CHART_YAML.read_text()
    text = re.sub(r"^version: .*$", f"version: {version}", text, count=1, flags=re.MULTILINE)
    return re.sub(r"^appVersion: .*$", f'appVersion: "{version}"', text, count=1, flags=re.MULTILINE)


def outputs(helm: str) -> dict[Path, str]:
    """Every file this script keeps: Chart.yaml's version, and deploy/kubernetes."""
    files = {CHART_YAML: chart_yaml(VERSION.read_text().strip())}
    for name, content in tree(helm_template(helm, [KUBERNETES_VALUES])).items():
        files[MANIFESTS / name] = content
    return files


def stale_files(helm: str) -> tuple[dict[Path, str], list[Path]]:
    """What to write, and the generated files under deploy/kubernetes that no render writes any more."""
    files = outputs(helm)
    generated = {
        p for p in MANIFESTS.rglob("*.yaml") if p.read_text().startswith("# Generated by deploy/helm/")
    }
    generated |= {MANIFESTS / "kustomization.yaml", MANIFESTS / MONITORING / "kustomization.yaml"}
    return files, sorted(p for p in generated if p.exists() and p not in files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--helm", default="helm", help="the helm binary (deploy/devstack/helm-tool.sh helm)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is out of date")
    parser.add_argument(
        "--render-to", type=Path, help="write a render of --values into this directory instead"
    )
    parser.add_argument("-f", "--values", type=Path, action="append", default=[], help="a values file")
    parser.add_argument("--set", action="append", default=[], help="a value, as helm's --set")
    parser.add_argument("--secrets", type=Path, help="Secrets the render names, for its secrets.example.yaml")
    args = parser.parse_args(argv)
    try:
        if args.render_to:
            extra = args.secrets.read_text() if args.secrets else ""
            for name, content in tree(helm_template(args.helm, args.values, args.set), extra).items():
                path = args.render_to / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
            return 0
        files, orphans = stale_files(args.helm)
    except RenderError as err:
        print(f"build_kubernetes: {err}", file=sys.stderr)
        return 1
    stale = [p for p, content in files.items() if not p.exists() or p.read_text() != content] + orphans
    if args.check:
        if stale:
            names = ", ".join(p.relative_to(ROOT).as_posix() for p in stale)
            print(f"out of date (run deploy/helm/build_kubernetes.py): {names}", file=sys.stderr)
            return 1
        return 0
    for path in stale:
        if path in orphans:
            path.unlink()
            print(f"removed {path.relative_to(ROOT)}")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
