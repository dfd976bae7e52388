"""deploy/monitoring and deploy/kubernetes/monitoring: the dashboards and the PrometheusRule are
what build_monitoring.py writes, the PodMonitor and the PrometheusRule are valid Prometheus
Operator resources, the PodMonitor scrapes every service's metrics port, and every alert has its
runbook in docs/operations.md.

No cluster runs here, and kubernetes-validate bundles no custom resource: the two resources are
read through the pydantic models of the operator's CRDs (`cloudcoil.models.prometheus_operator`,
v1) and must come back unchanged, so a field the CRD does not have (it would be dropped) or a
value of the wrong type fails, as the broken copies below show. The PromQL of the rules is
checked by promtool in `make lint`; the dashboards' by tests/integration/monitoring.
"""

import copy
import importlib.util
import json
import re
import sys
from types import ModuleType
from typing import Any

import pytest
import yaml
from cloudcoil.models.prometheus_operator.v1 import PodMonitor, PrometheusRule
from pydantic import BaseModel, ValidationError

from tests.unit.deploy.test_kubernetes import MANIFESTS, ROOT, all_resources, kind

MONITORING = MANIFESTS / "monitoring"
ALERTS = ROOT / "deploy" / "monitoring" / "alerts.yaml"
OPERATIONS = ROOT / "docs" / "operations.md"

Resource = dict[str, Any]


def build_module() -> ModuleType:
    """deploy/monitoring/build_monitoring.py (a script, not a package)."""
    path = ROOT / "deploy" / "monitoring" / "build_monitoring.py"
    spec = importlib.util.spec_from_file_location("build_monitoring", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("build_monitoring", module)
    spec.loader.exec_module(module)
    return module


def load(name: str) -> Resource:
    (doc,) = [d for d in yaml.safe_load_all((MONITORING / name).read_text()) if d]
    assert isinstance(doc, dict)
    return doc


def round_trip_problems(resource: Resource, model: type[BaseModel]) -> list[str]:
    """What the CRD's model refuses or drops of ``resource`` (a dropped field is one it lacks)."""
    try:
        parsed = model.model_validate(resource)
    except ValidationError as err:
        return [f"{resource.get('kind')}: {e['loc']}: {e['msg']}" for e in err.errors()]
    back = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return (
        [] if back == resource else [f"{resource.get('kind')}: fields the CRD lacks: {_diff(resource, back)}"]
    )


def _diff(given: Any, kept: Any, path: str = "") -> list[str]:
    if isinstance(given, dict) and isinstance(kept, dict):
        return [p for key, value in given.items() for p in _diff(value, kept.get(key), f"{path}.{key}")]
    if isinstance(given, list) and isinstance(kept, list) and len(given) == len(kept):
        return [
            p for i, (a, b) in enumerate(zip(given, kept, strict=True)) for p in _diff(a, b, f"{path}[{i}]")
        ]
    return [] if given == kept else [path or "."]


def scrape_problems(monitor: Resource, resources: list[Resource]) -> list[str]:
    """Every Deployment the PodMonitor selects has one endpoint on a named containerPort of its
    listener, and every service Deployment is selected."""
    spec = monitor["spec"]
    (expression,) = spec["selector"]["matchExpressions"]
    selected = set(expression["values"])
    ports = {e["port"] for e in spec["podMetricsEndpoints"]}
    problems = []
    for deployment in kind(resources, "Deployment"):
        component = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
        template = deployment["spec"]["template"]
        if component not in selected:
            problems.append(f"{component}: not selected, so not scraped")
            continue
        if template["metadata"]["labels"].get(expression["key"]) != component:
            problems.append(f"{component}: its pods lack {expression['key']}={component}")
        named = {p.get("name") for c in template["spec"]["containers"] for p in c.get("ports", [])}
        if len(named & ports) != 1:
            problems.append(
                f"{component}: {len(named & ports)} endpoints of {sorted(ports)} on ports {sorted(named)}"
            )
    problems += [
        f"endpoint {e['port']}: path {e.get('path')}"
        for e in spec["podMetricsEndpoints"]
        if e.get("path") != "/metrics"
    ]
    return problems


def runbook_problems(rules: Resource, operations: str) -> list[str]:
    """Every alert's runbook_url is a heading of docs/operations.md named after the alert."""
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", operations, re.M)
    }
    problems = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            name = rule["alert"]
            url = rule["annotations"].get("runbook_url", "")
            if url != f"docs/operations.md#{name.lower()}":
                problems.append(f"{name}: runbook_url {url!r}")
            if name.lower() not in anchors:
                problems.append(f"{name}: no heading `{name}` in docs/operations.md")
            if not rule["labels"].get("severity"):
                problems.append(f"{name}: no severity")
    return problems


def test_dashboards_and_the_prometheus_rule_are_what_the_script_writes() -> None:
    stale = [
        path.relative_to(ROOT).as_posix()
        for path, content in build_module().outputs().items()
        if not path.exists() or path.read_text() != content
    ]
    assert stale == [], "run python3 deploy/monitoring/build_monitoring.py"


def test_the_dashboards_are_grafana_dashboards_with_queries() -> None:
    files = sorted((ROOT / "deploy" / "monitoring" / "dashboards").glob("*.json"))
    assert [f.stem for f in files] == sorted(
        [
            "slotflow-overview",
            *(f"slotflow-{s}" for s in ("ticker", "claimer", "orchestrator", "dlq", "api", "stats")),
        ]
    )
    uids = set()
    for file in files:
        board = json.loads(file.read_text())
        uids.add(board["uid"])
        assert board["templating"]["list"][0]["type"] == "datasource"
        for panel in board["panels"]:
            assert ({p["id"] for p in board["panels"]}).__len__() == len(board["panels"]), file.name
            if panel["type"] != "row":
                assert panel["targets"], f"{file.name}: {panel['title']} has no query"
                assert all("$namespace" in t["expr"] for t in panel["targets"]), panel["title"]
    assert len(uids) == len(files)


def test_the_operator_resources_fit_the_crds() -> None:
    assert round_trip_problems(load("podmonitor.yaml"), PodMonitor) == []
    assert round_trip_problems(load("prometheusrule.yaml"), PrometheusRule) == []


def test_the_crd_check_refuses_unknown_fields_and_wrong_types() -> None:
    monitor = load("podmonitor.yaml")
    unknown = copy.deepcopy(monitor)
    unknown["spec"]["podMetricsEndpoints"][0]["pathh"] = "/metrics"
    wrong = copy.deepcopy(monitor)
    wrong["spec"]["podMetricsEndpoints"][0]["relabelings"] = "service"
    rule = load("prometheusrule.yaml")
    misnamed = copy.deepcopy(rule)
    misnamed["spec"]["groups"][0]["rules"][0]["expression"] = misnamed["spec"]["groups"][0]["rules"][0].pop(
        "expr"
    )
    assert round_trip_problems(unknown, PodMonitor) == [
        "PodMonitor: fields the CRD lacks: ['.spec.podMetricsEndpoints[0].pathh']"
    ]
    assert round_trip_problems(wrong, PodMonitor)
    assert round_trip_problems(misnamed, PrometheusRule)


def test_the_pod_monitor_scrapes_every_service() -> None:
    resources = all_resources()
    monitor = load("podmonitor.yaml")
    assert scrape_problems(monitor, resources) == []
    dropped = copy.deepcopy(monitor)
    dropped["spec"]["podMetricsEndpoints"] = dropped["spec"]["podMetricsEndpoints"][1:]
    assert sorted(scrape_problems(dropped, resources)) == sorted(
        f"{c}: 0 endpoints of ['health', 'http'] on ports ['metrics']"
        for c in ("ticker", "claimer", "orchestrator", "dlq")
    )


def test_the_monitoring_kustomization_lists_both_resources() -> None:
    (kustomization,) = yaml.safe_load_all((MONITORING / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in MONITORING.glob("*.yaml") if p.name != "kustomization.yaml"
    )


def test_every_alert_has_its_runbook() -> None:
    rules = yaml.safe_load(ALERTS.read_text())
    operations = OPERATIONS.read_text()
    assert runbook_problems(rules, operations) == []
    broken = copy.deepcopy(rules)
    broken["groups"][0]["rules"][0]["alert"] = "SlotflowNoSuchAlert"
    assert runbook_problems(broken, operations) == [
        "SlotflowNoSuchAlert: runbook_url 'docs/operations.md#slotflowfiringlate'",
        "SlotflowNoSuchAlert: no heading `SlotflowNoSuchAlert` in docs/operations.md",
    ]


@pytest.mark.parametrize("name", ["podmonitor.yaml", "prometheusrule.yaml"])
def test_the_resources_carry_the_monitoring_component(name: str) -> None:
    assert load(name)["metadata"]["labels"]["app.kubernetes.io/component"] == "monitoring"
