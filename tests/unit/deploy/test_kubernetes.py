"""deploy/kubernetes (the Helm chart's render): every manifest against the Kubernetes API's JSON
schemas, and our own rules.

No cluster runs on the CI machines. kubernetes-validate bundles the API's schemas per Kubernetes
version (its "strict" set refuses unknown fields), so the manifests are checked offline against
the oldest and the newest version we support. Our own checks read the manifests with the service
settings classes themselves: each container's environment (ConfigMap, Secret and `env`) is fed to
the settings it configures, so a misspelt variable, a value that does not parse or a listener on
another port than the probes use fails here.

Each rule is a function returning its problems; the tests assert none on the real manifests and
some on a broken copy, so a rule that could never fail shows up.

deploy/kubernetes is the chart (deploy/helm/slotflow) rendered with its default values for
`kubectl apply -k`; `make check-helm` runs this module again on the chart's other renders (examples
values files) by pointing SLOTFLOW_KUBERNETES_MANIFESTS at each, so every rule holds for them too.
"""

import base64
import copy
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from pydantic_settings import BaseSettings

from slotflow.health import LIVENESS_PATH, READINESS_PATH
from slotflow.kafka.security import KafkaSecurity
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow_api.config import ApiSettings
from slotflow_api.routes.health import router as api_health
from slotflow_base.settings import KafkaConnection
from slotflow_claimer.config import ClaimerSettings
from slotflow_dlq.config import DlqSettings
from slotflow_orchestrator.config import OrchestratorSettings
from slotflow_stats.config import StatsSettings
from slotflow_ticker.config import TickerSettings

ROOT = Path(__file__).parents[3]
#: The manifests checked: deploy/kubernetes, or a render of the chart (deploy/helm/check-helm.sh).
MANIFESTS = Path(os.environ.get("SLOTFLOW_KUBERNETES_MANIFESTS") or ROOT / "deploy" / "kubernetes")
#: Checking a render of `make check-helm` rather than the committed manifests.
RENDER = MANIFESTS.resolve() != (ROOT / "deploy" / "kubernetes").resolve()
#: The oldest Kubernetes minor the manifests are for, and the newest the validator knows.
KUBERNETES_VERSIONS = ("1.32", "1.37")
#: Placeholders to fill before applying; kept out of kustomization.yaml on purpose.
SECRETS_EXAMPLE = "secrets.example.yaml"

Resource = dict[str, Any]

#: Each long-running service's settings: what its container's environment must parse into.
#: Every one also reads the shared Kafka and PostgreSQL settings (the stats worker the part of the
#: Kafka settings it shares with the library, slotflow_base.settings.KafkaConnection).
SERVICE_SETTINGS: dict[str, list[type[BaseSettings]]] = {
    "ticker": [TickerSettings, KafkaSettings, PostgresSettings],
    "claimer": [ClaimerSettings, KafkaSettings, PostgresSettings],
    "orchestrator": [OrchestratorSettings, KafkaSettings, PostgresSettings],
    "dlq": [DlqSettings, KafkaSettings, PostgresSettings],
    "api": [ApiSettings, KafkaSettings, PostgresSettings],
    "stats": [StatsSettings, KafkaConnection, PostgresSettings],
}
#: Where each service's HTTP listener is: its settings class and the host and port fields.
LISTENERS: dict[str, tuple[type[BaseSettings], str, str]] = {
    "ticker": (TickerSettings, "metrics_host", "metrics_port"),
    "claimer": (ClaimerSettings, "metrics_host", "metrics_port"),
    "orchestrator": (OrchestratorSettings, "metrics_host", "metrics_port"),
    "dlq": (DlqSettings, "metrics_host", "metrics_port"),
    "api": (ApiSettings, "host", "port"),
    "stats": (StatsSettings, "health_host", "health_port"),
}
#: Inside a pod a listener must bind every interface: 127.0.0.1 is the pod's own loopback, which
#: neither the kubelet's probes nor a scraper reach.
EVERY_INTERFACE = "0.0.0.0"  # noqa: S104 - the point of the check
#: Python's tempfile directory, which the read-only root filesystem must not be.
SCRATCH = "/tmp"  # noqa: S108 - a path inside the container, checked to be a volume
#: The paths a probe may ask: the api's health routes; the liveness and readiness paths of the
#: workers' listener (slotflow.health; it answers any other path 404).
PROBE_PATHS: dict[str, set[str]] = {
    "api": {getattr(route, "path", "") for route in api_health.routes} - {"/metrics"},
    **{name: {LIVENESS_PATH, READINESS_PATH} for name in ("ticker", "claimer", "orchestrator", "dlq")},
    # The stats worker's own health listener (slotflow_stats.health); faust's web server is off.
    "stats": {"/livez", "/readyz"},
}
#: What liveness and readiness must ask where a service answers them apart: a liveness probe on
#: /readyz restarts a replica whenever PostgreSQL or Kafka is away, and a readiness probe on /livez
#: keeps a replica that cannot work in rotation.
PROBE_FOR: dict[str, dict[str, str]] = {
    name: {"livenessProbe": LIVENESS_PATH, "readinessProbe": READINESS_PATH}
    for name in ("ticker", "claimer", "orchestrator", "dlq", "stats")
}
#: Services without any HTTP listener: no probe can reach them (none today).
NO_LISTENER: set[str] = set()
#: Variables without which a service runs, but not usefully: it would look for Kafka and
#: PostgreSQL on its own loopback, or serve no handler or workflow.
REQUIRED_ENV: dict[str, set[str]] = {
    "*": {"SLOTFLOW_KAFKA_BOOTSTRAP", "SLOTFLOW_PG_DSN"},
    "claimer": {"SLOTFLOW_CLAIMER_HANDLER_MODULES"},
    "orchestrator": {"SLOTFLOW_ORCHESTRATOR_WORKFLOW_MODULES"},
    "stats": {"SLOTFLOW_STATS_DATA_DIR", "SLOTFLOW_STATS_CHANGELOG_REPLICATION_FACTOR"},
    "topics": {"SLOTFLOW_KAFKA_BOOTSTRAP"},
}
#: Read by slotflow_base.logs (slotflow.logs) with os.environ, not a settings class (checked against its source below).
LOG_ENV = {"SLOTFLOW_LOG_FORMAT", "SLOTFLOW_LOG_LEVEL", "SLOTFLOW_LOG_KAFKA_LEVEL"}


# -- loading ---------------------------------------------------------------------------------


def load(name: str) -> list[Resource]:
    docs = [doc for doc in yaml.safe_load_all((MANIFESTS / name).read_text()) if doc]
    for doc in docs:
        assert isinstance(doc, dict), name
    return docs


def manifest_files() -> list[str]:
    return sorted(p.name for p in MANIFESTS.glob("*.yaml") if p.name != "kustomization.yaml")


def all_resources() -> list[Resource]:
    return [doc for name in manifest_files() for doc in load(name)]


def kind(resources: list[Resource], k: str) -> list[Resource]:
    return [r for r in resources if r["kind"] == k]


def by_name(resources: list[Resource], k: str) -> dict[str, Resource]:
    return {r["metadata"]["name"]: r for r in kind(resources, k)}


def workloads(resources: list[Resource]) -> Iterator[tuple[str, Resource, Resource]]:
    """(component, workload, container) for every container of every Deployment and Job."""
    for r in resources:
        if r["kind"] in ("Deployment", "Job"):
            component = r["metadata"]["labels"]["app.kubernetes.io/component"]
            for container in r["spec"]["template"]["spec"]["containers"]:
                yield component, r, container


def container_env(resources: list[Resource], container: Resource) -> dict[str, str]:
    """The environment a container starts with: envFrom (ConfigMaps, Secrets) then env."""
    maps = by_name(resources, "ConfigMap")
    secrets = by_name(resources, "Secret")
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(maps[source["configMapRef"]["name"]]["data"])
        else:
            env.update(secret_data(secrets[source["secretRef"]["name"]]))
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = secret_data(secrets[ref["name"]])[ref["key"]]
    return env


def secret_data(secret: Resource) -> dict[str, str]:
    """A Secret's keys and values: its stringData, and its data decoded."""
    data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    return {**data, **(secret.get("stringData") or {})}


def known_env() -> set[str]:
    """Every variable a slotflow process reads: the settings classes' fields, prefixed."""
    classes = [cls for group in SERVICE_SETTINGS.values() for cls in group]
    names = LOG_ENV | {"PYTHONPATH"}
    # The Kafka TLS and SASL settings (docs/security.md, "Kafka").
    classes.append(KafkaSecurity)
    for cls in classes:
        prefix = str(cls.model_config.get("env_prefix", ""))
        names |= {f"{prefix}{field}".upper() for field in cls.model_fields}
    return names


# -- rules -----------------------------------------------------------------------------------


def schema_problems(resources: list[Resource], version: str) -> list[str]:
    problems = []
    for r in resources:
        what = f"{r.get('kind')}/{r.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(r, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            path = ".".join(str(p) for p in err.path)
            problems.append(f"{what}: {path}: {err.message}")
        except kubernetes_validate.SchemaNotFoundError as err:
            problems.append(f"{what}: {err.message}")
    return problems


def probe_problems(resources: list[Resource]) -> list[str]:
    problems = []
    for r in kind(resources, "Deployment"):
        component = r["metadata"]["labels"]["app.kubernetes.io/component"]
        for c in r["spec"]["template"]["spec"]["containers"]:
            ports = c.get("ports", [])
            names = {p.get("name") for p in ports} | {p["containerPort"] for p in ports}
            if component in NO_LISTENER:
                if ports or any(k in c for k in ("livenessProbe", "readinessProbe", "startupProbe")):
                    problems.append(f"{component}: has no listener, so neither ports nor probes")
                continue
            for probe in ("livenessProbe", "readinessProbe"):
                if probe not in c:
                    problems.append(f"{component}: no {probe}")
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                if probe in c and c[probe]["httpGet"]["path"] not in PROBE_PATHS[component]:
                    problems.append(
                        f"{component}: {probe} asks {c[probe]['httpGet']['path']}, not a health path"
                    )
                if probe in c and c[probe]["httpGet"]["port"] not in names:
                    problems.append(
                        f"{component}: {probe} port {c[probe]['httpGet']['port']} is no containerPort"
                    )
            for probe, path in PROBE_FOR.get(component, {}).items():
                if probe in c and c[probe]["httpGet"]["path"] != path:
                    problems.append(f"{component}: {probe} asks {c[probe]['httpGet']['path']}, not {path}")
    return problems


def listener_problems(resources: list[Resource], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The listener the service opens (its settings, read from the container's environment) is
    the containerPort, on every interface (the default 127.0.0.1 is the pod's own loopback)."""
    problems = []
    for component, r, c in workloads(resources):
        if r["kind"] != "Deployment" or component not in LISTENERS:
            continue
        cls, host_field, port_field = LISTENERS[component]
        settings = settings_from(cls, container_env(resources, c), monkeypatch)
        port = getattr(settings, port_field)
        if port not in {p["containerPort"] for p in c.get("ports", [])}:
            problems.append(f"{component}: listens on {port}, not on a containerPort")
        if getattr(settings, host_field) != EVERY_INTERFACE:
            problems.append(
                f"{component}: {host_field} {getattr(settings, host_field)!r} is not {EVERY_INTERFACE}"
            )
    return problems


def settings_from(cls: type[BaseSettings], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as m:
        for name in [n for n in os.environ if n.startswith("SLOTFLOW_")]:
            m.delenv(name)
        for name, value in env.items():
            m.setenv(name, value)
        return cls()


def env_problems(resources: list[Resource], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    problems = []
    known = known_env()
    for component, _, c in workloads(resources):
        env = container_env(resources, c)
        required = REQUIRED_ENV.get(component, set()) | (
            REQUIRED_ENV["*"] if component != "topics" else set()
        )
        problems += [f"{component}: {name} not set" for name in sorted(required - env.keys())]
        problems += [f"{component}: {name} is read by no setting" for name in sorted(env.keys() - known)]
        for cls in SERVICE_SETTINGS.get(component, [KafkaSettings]):
            try:
                settings_from(cls, env, monkeypatch)
            except ValueError as err:
                problems.append(f"{component}: {cls.__name__}: {err}")
    return problems


def dockerfile_user() -> int:
    match = re.search(r"^USER (\d+):(\d+)$", (ROOT / "deploy/docker/Dockerfile").read_text(), re.M)
    assert match, "deploy/docker/Dockerfile names no numeric USER"
    return int(match.group(1))


def security_problems(resources: list[Resource]) -> list[str]:
    problems = []
    uid = dockerfile_user()
    for component, r, c in workloads(resources):
        pod = r["spec"]["template"]["spec"]
        sc = pod.get("securityContext", {})
        if sc.get("runAsNonRoot") is not True or sc.get("runAsUser") != uid:
            problems.append(f"{component}: pod not runAsNonRoot as the image's user {uid}")
        if pod.get("automountServiceAccountToken") is not False:
            problems.append(f"{component}: mounts a service account token")
        csc = c.get("securityContext", {})
        if csc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{component}: allows privilege escalation")
        if csc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{component}: writable root filesystem")
        if csc.get("capabilities", {}).get("drop") != ["ALL"]:
            problems.append(f"{component}: capabilities not all dropped")
        scratch = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
        writable = {m["mountPath"] for m in c.get("volumeMounts", []) if m["name"] in scratch}
        if SCRATCH not in writable:
            problems.append(f"{component}: no writable {SCRATCH}")
        # Where faust writes: its working directory and its data dir (read by the stats worker only).
        data_dir = (
            container_env(resources, c).get("SLOTFLOW_STATS_DATA_DIR") if component == "stats" else None
        )
        for path in [c.get("workingDir"), data_dir]:
            if path and not any(path == w or path.startswith(w + "/") for w in writable):
                problems.append(f"{component}: {path} is on the read-only root filesystem")
        resources_ = c.get("resources", {})
        if not {"cpu", "memory"} <= resources_.get("requests", {}).keys() or "memory" not in resources_.get(
            "limits", {}
        ):
            problems.append(f"{component}: no cpu and memory requests and memory limit")
    return problems


def image_name(image: str) -> str:
    """An image reference without its tag (registry.example.com:5000/slotflow:0.1.0: up to the last colon
    after the last slash)."""
    name, _, tag = image.rpartition(":")
    return name if name and "/" not in tag else image


def image_problems(resources: list[Resource], kustomization: Resource) -> list[str]:
    images = {image_name(c["image"]) for _, _, c in workloads(resources)}
    problems = [] if len(images) == 1 else [f"not one image everywhere: {sorted(images)}"]
    problems += [
        f"kustomization.yaml does not set image {image}"
        for image in images
        if image not in {i["name"] for i in kustomization.get("images", [])}
    ]
    return problems


def reference_problems(resources: list[Resource]) -> list[str]:
    """ConfigMaps and Secrets referenced exist; PDBs and the Service select existing pods."""
    problems = []
    maps, secrets = by_name(resources, "ConfigMap"), by_name(resources, "Secret")
    pods = {r["metadata"]["name"]: r["spec"]["template"] for r in kind(resources, "Deployment")}
    for component, r, c in workloads(resources):
        for source in c.get("envFrom", []):
            if "configMapRef" in source and source["configMapRef"]["name"] not in maps:
                problems.append(f"{component}: no ConfigMap {source['configMapRef']['name']}")
            if "secretRef" in source and source["secretRef"]["name"] not in secrets:
                problems.append(f"{component}: no Secret {source['secretRef']['name']}")
        for volume in r["spec"]["template"]["spec"].get("volumes", []):
            # An optional Secret (the TLS files) may be absent: the pod starts without it.
            secret = volume.get("secret", {})
            if secret and not secret.get("optional") and secret["secretName"] not in secrets:
                problems.append(f"{component}: no Secret {volume['secret']['secretName']}")

    def selected(selector: dict[str, str]) -> list[str]:
        return [n for n, t in pods.items() if selector.items() <= t["metadata"]["labels"].items()]

    for pdb in kind(resources, "PodDisruptionBudget"):
        if not selected(pdb["spec"]["selector"]["matchLabels"]):
            problems.append(f"PDB {pdb['metadata']['name']} selects no Deployment's pods")
    covered = {
        n
        for pdb in kind(resources, "PodDisruptionBudget")
        for n in selected(pdb["spec"]["selector"]["matchLabels"])
    }
    replicas = {r["metadata"]["name"]: r["spec"].get("replicas", 1) for r in kind(resources, "Deployment")}
    # Every service that runs more than one replica keeps some through a drain; a budget on a
    # single replica that must stay up would block every drain of its node.
    problems += [
        f"no PodDisruptionBudget for {n}" for n, count in replicas.items() if count > 1 and n not in covered
    ]
    for pdb in kind(resources, "PodDisruptionBudget"):
        for n in selected(pdb["spec"]["selector"]["matchLabels"]):
            if pdb["spec"].get("minAvailable", 0) >= replicas[n]:
                problems.append(f"PDB {pdb['metadata']['name']} lets no pod of {n} be drained")
    for service in kind(resources, "Service"):
        targets = selected(service["spec"]["selector"])
        if not targets:
            problems.append(f"Service {service['metadata']['name']} selects no pods")
        for port in service["spec"]["ports"]:
            for t in targets:
                containers = pods[t]["spec"]["containers"]
                names = {
                    p.get(key)
                    for c in containers
                    for p in c.get("ports", [])
                    for key in ("name", "containerPort")
                }
                if port["targetPort"] not in names:
                    problems.append(
                        f"Service {service['metadata']['name']}: targetPort {port['targetPort']} not on {t}"
                    )
    return problems


def compose_problems(resources: list[Resource]) -> list[str]:
    """Every slotflow container of compose.yaml runs here with the same command: the long-running
    ones as Deployments, the one-shot ones (restart "no") as Jobs."""
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    problems = []
    for name, spec in compose.items():
        if "SLOTFLOW_IMAGE" not in str(spec.get("image", "")):
            continue  # Kafka and PostgreSQL: the existing ones
        want = "Job" if spec.get("restart") == "no" else "Deployment"
        matches = [
            c
            for component, r, c in workloads(resources)
            if r["kind"] == want
            and component == name
            and c["command"][: len(spec["command"])] == spec["command"]
        ]
        if not matches:
            problems.append(f"compose service {name}: no {want} running {spec['command']}")
    return problems


#: Where a service's replicas are spread: zones first (a zone's outage), then nodes (a node's).
SPREAD_KEYS = {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}


def spread_problems(resources: list[Resource]) -> list[str]:
    """Every Deployment of more than one replica is spread over zones and nodes, softly: a hard
    constraint (DoNotSchedule) leaves replicas pending on a cluster of one zone."""
    problems = []
    for r in kind(resources, "Deployment"):
        if r["spec"].get("replicas", 1) <= 1:
            continue
        name = r["metadata"]["name"]
        pod = r["spec"]["template"]
        constraints = pod["spec"].get("topologySpreadConstraints", [])
        spread = {
            c["topologyKey"]
            for c in constraints
            if c["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        }
        problems += [f"{name}: not spread over {key}" for key in sorted(SPREAD_KEYS - spread)]
        problems += [
            f"{name}: {c['topologyKey']} is {c['whenUnsatisfiable']}, not ScheduleAnyway"
            for c in constraints
            if c["whenUnsatisfiable"] != "ScheduleAnyway"
        ]
    return problems


#: The DNS port every pod must reach (service names, the brokers' and the database's host names).
DNS_PORT = 53
#: PostgreSQL's port when a DSN names none.
PG_DEFAULT_PORT = 5432


def network_problems(resources: list[Resource]) -> list[str]:
    """With NetworkPolicies, each pod is selected by one, which lets in its listener's port and
    nothing else, and lets out the ports of the brokers its bootstrap names, of the database its DSN
    names, and DNS: a policy that blocks them stops the service, and one that opens more ports
    than the listener's exposes what needs no exposing."""
    policies = kind(resources, "NetworkPolicy")
    if not policies:
        return []
    problems = []
    for _, r, c in workloads(resources):
        name = r["metadata"]["name"]
        labels = r["spec"]["template"]["metadata"]["labels"]
        selecting = [
            p for p in policies if p["spec"]["podSelector"].get("matchLabels", {}).items() <= labels.items()
        ]
        if len(selecting) != 1:
            problems.append(f"{name}: {len(selecting)} NetworkPolicies select its pods, not 1")
            continue
        spec = selecting[0]["spec"]
        if set(spec.get("policyTypes", [])) != {"Ingress", "Egress"}:
            problems.append(f"{name}: its NetworkPolicy restricts {spec.get('policyTypes')}, not both ways")
        listener = {p["containerPort"] for p in c.get("ports", [])}
        ingress = {port.get("port") for rule in spec.get("ingress", []) for port in rule.get("ports", [None])}
        if ingress != listener:
            problems.append(
                f"{name}: ingress to {sorted(map(str, ingress))}, its listener is {sorted(listener)}"
            )
        egress = spec.get("egress", [])
        if any("ports" not in rule and "to" not in rule for rule in egress):
            continue  # a rule of neither lets everything out
        allowed = {port["port"] for rule in egress for port in rule.get("ports", [])}
        env = container_env(resources, c)
        needed = {("DNS", DNS_PORT)}
        for address in env.get("SLOTFLOW_KAFKA_BOOTSTRAP", "").split(","):
            needed.add(("Kafka", int(address.rsplit(":", 1)[1])))
        if "SLOTFLOW_PG_DSN" in env:
            needed.add(("PostgreSQL", urlsplit(env["SLOTFLOW_PG_DSN"]).port or PG_DEFAULT_PORT))
        problems += [
            f"{name}: egress to {what} port {port} not allowed"
            for what, port in sorted(needed)
            if port not in allowed
        ]
    return problems


def job_problems(resources: list[Resource]) -> list[str]:
    """A Job's pod template cannot change: each Job's name carries its image's tag, so a new
    release makes a new Job rather than a refused update, and a finished one goes away by itself."""
    problems = []
    for r in kind(resources, "Job"):
        name = r["metadata"]["name"]
        if "ttlSecondsAfterFinished" not in r["spec"]:
            problems.append(f"Job {name}: no ttlSecondsAfterFinished")
        for c in r["spec"]["template"]["spec"]["containers"]:
            tag = c["image"][len(image_name(c["image"])) + 1 :]
            if not tag or not name.endswith("-" + re.sub(r"[^a-z0-9]+", "-", tag.lower())):
                problems.append(f"Job {name}: its name does not carry its image's tag {tag!r}")
    return problems


#: The label Helm gives what it manages; the plain manifests (deploy/kubernetes) have none.
MANAGED_BY_HELM = ("app.kubernetes.io/managed-by", "Helm")


def checksum_problems(resources: list[Resource]) -> list[str]:
    """Under Helm, a changed ConfigMap or chart-made Secret must roll the pods that read it
    (Kubernetes restarts nothing by itself): each pod template carries their checksums."""
    problems = []
    helm_secrets = {
        r["metadata"]["name"]
        for r in kind(resources, "Secret")
        if r["metadata"].get("labels", {}).get(MANAGED_BY_HELM[0]) == MANAGED_BY_HELM[1]
    }
    for component, r, c in workloads(resources):
        if r["kind"] != "Deployment" or r["metadata"]["labels"].get(MANAGED_BY_HELM[0]) != MANAGED_BY_HELM[1]:
            continue
        annotations = r["spec"]["template"]["metadata"].get("annotations", {})
        refs = [s["secretRef"]["name"] for s in c.get("envFrom", []) if "secretRef" in s]
        if "checksum/config" not in annotations:
            problems.append(f"{component}: no checksum/config, so a changed setting rolls nothing")
        if set(refs) & helm_secrets and "checksum/secret" not in annotations:
            problems.append(f"{component}: no checksum/secret, so a changed secret rolls nothing")
    return problems


# -- tests -----------------------------------------------------------------------------------


def test_kustomization_lists_every_manifest_but_the_secret_placeholders() -> None:
    (kustomization,) = load("kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(set(manifest_files()) - {SECRETS_EXAMPLE})


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_validate_against_the_kubernetes_schemas(version: str) -> None:
    assert schema_problems(all_resources(), version) == []


def test_the_validator_refuses_unknown_fields_and_wrong_types() -> None:
    ticker = by_name(all_resources(), "Deployment")["slotflow-ticker"]
    unknown = copy.deepcopy(ticker)
    unknown["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {"httpGet": {"port": 1}}
    wrong = copy.deepcopy(ticker)
    wrong["spec"]["replicas"] = "two"
    for broken in (unknown, wrong):
        assert len(schema_problems([broken], KUBERNETES_VERSIONS[0])) == 1


CHECKS: list[Callable[[list[Resource]], list[str]]] = [
    probe_problems,
    security_problems,
    reference_problems,
    compose_problems,
    spread_problems,
    network_problems,
    job_problems,
    checksum_problems,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_own_rules_hold(check: Callable[[list[Resource]], list[str]]) -> None:
    assert check(all_resources()) == []


def test_listeners_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    resources = all_resources()
    assert listener_problems(resources, monkeypatch) == []
    assert env_problems(resources, monkeypatch) == []


def test_one_image_everywhere_named_in_the_kustomization() -> None:
    (kustomization,) = load("kustomization.yaml")
    assert image_problems(all_resources(), kustomization) == []


def test_every_service_settings_group_has_a_deployment() -> None:
    components = {component for component, r, _ in workloads(all_resources()) if r["kind"] == "Deployment"}
    assert components == set(SERVICE_SETTINGS)
    assert set(LISTENERS) | NO_LISTENER == set(SERVICE_SETTINGS)


def test_log_variables_are_the_ones_slotflow_logs_reads() -> None:
    source = (ROOT / "libs/slotflow-base/src/slotflow_base/logs.py").read_text()
    assert set(re.findall(r'"(SLOTFLOW_LOG_[A-Z_]+)"', source)) == LOG_ENV


def mutate(resources: list[Resource], what: str, change: Callable[[Resource], None]) -> list[Resource]:
    """A copy of `resources` with `change` applied to the one `what` ("Kind/name") names."""
    out = copy.deepcopy(resources)
    (target,) = [r for r in out if f"{r['kind']}/{r['metadata']['name']}" == what]
    change(target)
    return out


def container(r: Resource) -> Resource:
    c: Resource = r["spec"]["template"]["spec"]["containers"][0]
    return c


@pytest.mark.skipif(
    RENDER, reason="the rules' refusals are shown on deploy/kubernetes; a render is only checked"
)
def test_the_rules_catch_broken_manifests(monkeypatch: pytest.MonkeyPatch) -> None:
    good = all_resources()
    (kustomization,) = load("kustomization.yaml")

    def no_readiness(r: Resource) -> None:
        del container(r)["readinessProbe"]

    def probe_elsewhere(r: Resource) -> None:
        container(r)["livenessProbe"]["httpGet"]["port"] = 9999

    def probe_nowhere(r: Resource) -> None:
        container(r)["readinessProbe"]["httpGet"]["path"] = "/ready"

    def liveness_on_readiness(r: Resource) -> None:
        container(r)["livenessProbe"]["httpGet"]["path"] = READINESS_PATH

    def metrics_as_probe(r: Resource) -> None:
        container(r)["readinessProbe"]["httpGet"]["path"] = "/metrics"

    def as_root(r: Resource) -> None:
        r["spec"]["template"]["spec"]["securityContext"]["runAsUser"] = 0

    def writable_root(r: Resource) -> None:
        container(r)["securityContext"]["readOnlyRootFilesystem"] = False

    def other_image(r: Resource) -> None:
        container(r)["image"] = "slotflow-other"

    def misspelt(r: Resource) -> None:
        r["data"]["SLOTFLOW_CLAIMER_HANDLER_MODULE"] = r["data"].pop("SLOTFLOW_CLAIMER_HANDLER_MODULES")

    def loopback(r: Resource) -> None:
        r["data"]["SLOTFLOW_TICKER_METRICS_HOST"] = "127.0.0.1"

    def other_port(r: Resource) -> None:
        r["data"]["SLOTFLOW_DLQ_METRICS_PORT"] = "9341"

    def bad_value(r: Resource) -> None:
        r["data"]["SLOTFLOW_STATS_CHANGELOG_REPLICATION_FACTOR"] = "0"

    def no_dsn(r: Resource) -> None:
        del r["stringData"]["SLOTFLOW_PG_DSN"]

    def other_command(r: Resource) -> None:
        container(r)["command"] = ["python", "-m", "slotflow_dlq"]

    assert probe_problems(mutate(good, "Deployment/slotflow-claimer", no_readiness))
    assert probe_problems(mutate(good, "Deployment/slotflow-api", probe_elsewhere))
    assert probe_problems(mutate(good, "Deployment/slotflow-api", probe_nowhere))
    assert probe_problems(mutate(good, "Deployment/slotflow-dlq", probe_nowhere))
    assert probe_problems(mutate(good, "Deployment/slotflow-claimer", liveness_on_readiness))
    assert probe_problems(mutate(good, "Deployment/slotflow-ticker", metrics_as_probe))
    assert security_problems(mutate(good, "Deployment/slotflow-ticker", as_root))
    assert security_problems(mutate(good, "Deployment/slotflow-stats", writable_root))
    assert image_problems(mutate(good, "Deployment/slotflow-orchestrator", other_image), kustomization)
    assert compose_problems(mutate(good, "Deployment/slotflow-ticker", other_command))
    assert env_problems(mutate(good, "ConfigMap/slotflow-config", misspelt), monkeypatch)
    assert env_problems(mutate(good, "ConfigMap/slotflow-config", bad_value), monkeypatch)
    assert env_problems(mutate(good, "Secret/slotflow-claimer", no_dsn), monkeypatch)
    assert listener_problems(mutate(good, "ConfigMap/slotflow-config", loopback), monkeypatch)
    assert listener_problems(mutate(good, "ConfigMap/slotflow-config", other_port), monkeypatch)

    def no_pdb(resources: list[Resource]) -> list[Resource]:
        return [
            r
            for r in resources
            if not (r["kind"] == "PodDisruptionBudget" and "claimer" in r["metadata"]["name"])
        ]

    assert reference_problems(no_pdb(good))

    def one_replica(r: Resource) -> None:
        r["spec"]["replicas"] = 1

    def pdb_min_one(r: Resource) -> None:
        del r["spec"]["maxUnavailable"]
        r["spec"]["minAvailable"] = 1

    def no_spread(r: Resource) -> None:
        del r["spec"]["template"]["spec"]["topologySpreadConstraints"]

    def hard_spread(r: Resource) -> None:
        r["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["whenUnsatisfiable"] = "DoNotSchedule"

    def ingress_elsewhere(r: Resource) -> None:
        r["spec"]["ingress"][0]["ports"][0]["port"] = 9999

    def broker_port_blocked(r: Resource) -> None:
        r["data"]["SLOTFLOW_KAFKA_BOOTSTRAP"] = "b-1.kafka.example.internal:19092"

    def database_port_blocked(r: Resource) -> None:
        r["stringData"]["SLOTFLOW_PG_DSN"] = "postgresql://slotflow_dlq@db.example.internal:15432/slotflow"

    def unversioned(r: Resource) -> None:
        r["metadata"]["name"] = "slotflow-topics"

    def kept_forever(r: Resource) -> None:
        del r["spec"]["ttlSecondsAfterFinished"]

    def under_helm_without_checksums(r: Resource) -> None:
        r["metadata"]["labels"][MANAGED_BY_HELM[0]] = MANAGED_BY_HELM[1]

    (job,) = [f"Job/{r['metadata']['name']}" for r in kind(good, "Job")]
    one_ticker = mutate(good, "Deployment/slotflow-ticker", one_replica)
    assert reference_problems(one_ticker) == []
    assert reference_problems(mutate(one_ticker, "PodDisruptionBudget/slotflow-ticker", pdb_min_one)) == [
        "PDB slotflow-ticker lets no pod of slotflow-ticker be drained"
    ]
    assert spread_problems(mutate(good, "Deployment/slotflow-claimer", no_spread))
    assert spread_problems(mutate(good, "Deployment/slotflow-api", hard_spread))
    assert network_problems(mutate(good, "NetworkPolicy/slotflow-orchestrator", ingress_elsewhere))
    assert network_problems(mutate(good, "ConfigMap/slotflow-config", broker_port_blocked))
    assert network_problems(mutate(good, "Secret/slotflow-dlq", database_port_blocked))
    assert job_problems(mutate(good, job, unversioned))
    assert job_problems(mutate(good, job, kept_forever))
    assert checksum_problems(mutate(good, "Deployment/slotflow-claimer", under_helm_without_checksums))
