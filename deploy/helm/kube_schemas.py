"""Kubernetes JSON schemas for kubeconform, offline, from the kubernetes-validate package in .venv.

    python3 deploy/helm/kube_schemas.py OUT_DIR 1.32 1.37    # prints kubeconform's -schema-location

kubernetes-validate (the validator of tests/unit/deploy/test_kubernetes.py) bundles the API's JSON
schemas per Kubernetes version, strict ones included (`additionalProperties: false`), but each
kind's file points into a shared `_definitions.json` through an absolute `/api/...` reference that
only its own registry resolves. kubeconform reads one file per kind, so each is written here
standalone: every reference replaced by the definition it names. Nothing is fetched: CI has no
business downloading schemas, and the validator's pinned copy is the one the unit tests trust.

Files go to OUT_DIR/v<version>.0-standalone-strict/<kind>-<group>-<version>.json, kubeconform's
naming (`{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{
.KindSuffix }}.json`); only the kinds slotflow's chart renders are written, once per package version.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Any

#: Every kind the chart renders (apiVersion group-version as kubeconform names it); the Prometheus
#: Operator's kinds have no schema here and are checked by their CRD models (test_monitoring.py).
KINDS = [
    "namespace-v1",
    "configmap-v1",
    "secret-v1",
    "service-v1",
    "deployment-apps-v1",
    "job-batch-v1",
    "poddisruptionbudget-policy-v1",
    "networkpolicy-networking-v1",
]
#: How a kind's file points into `_definitions.json`, and how a definition points at another.
DEFINITIONS_REF = "/api/_definitions.json#/$defs/"
LOCAL_REF = "#/$defs/"
SCHEMA_LOCATION = "{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json"


class SchemaError(Exception):
    """A schema this script cannot make standalone."""


def inline(node: Any, definitions: dict[str, Any], seen: tuple[str, ...] = ()) -> Any:
    """``node`` with every `$ref` into the definitions replaced by that definition, recursively."""
    if isinstance(node, list):
        return [inline(item, definitions, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        prefix = next((p for p in (DEFINITIONS_REF, LOCAL_REF) if ref.startswith(p)), None)
        if prefix is None:
            raise SchemaError(f"a reference this script does not know: {ref}")
        name = ref.removeprefix(prefix)
        if name in seen:
            # A recursive type (only CRDs' JSONSchemaProps are): no standalone form exists.
            raise SchemaError(f"recursive definition {name}")
        resolved = inline(definitions[name], definitions, (*seen, name))
        rest = {k: inline(v, definitions, seen) for k, v in node.items() if k != "$ref"}
        return {**resolved, **rest}
    return {key: inline(value, definitions, seen) for key, value in node.items()}


def standalone(version: str, kind: str) -> dict[str, Any]:
    """The strict schema of ``kind`` ("deployment-apps-v1") for Kubernetes ``version`` ("1.32")."""
    folder = resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"v{version}.0-local-strict"
    definitions = json.loads((folder / "_definitions.json").read_text())["$defs"]
    schema = json.loads((folder / f"{kind}.json").read_text())
    result: dict[str, Any] = inline(schema, definitions)
    return result


def write(out: Path, versions: list[str]) -> Path:
    """The schemas of ``versions`` under ``out`` (kept while kubernetes-validate's version is the
    same); returns the directory they are in."""
    root = out / f"kubernetes-validate-{installed_version('kubernetes-validate')}"
    for version in versions:
        folder = root / f"v{version}.0-standalone-strict"
        if (folder / f"{KINDS[-1]}.json").exists():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        for kind in KINDS:
            (folder / f"{kind}.json").write_text(json.dumps(standalone(version, kind)))
    return root


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = write(Path(argv[0]), argv[1:])
    print(f"{root}/{SCHEMA_LOCATION}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
