"""compose.yaml is valid and every container's command names a module that exists.

No Docker engine runs on the CI machines, so the file is checked structurally here.
"""

import importlib.util
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from slotflow.health import READINESS_PATH

ROOT = Path(__file__).parents[3]


def load_compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def test_infrastructure_services_are_defined_with_health_checks() -> None:
    services = load_compose()["services"]
    for name in ("kafka", "postgres"):
        assert "healthcheck" in services[name], name
    kafka_env = services["kafka"]["environment"]
    assert kafka_env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 1
    assert kafka_env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1


def app_commands() -> list[tuple[str, str]]:
    services = load_compose()["services"]
    return [
        (name, spec["command"][2])
        for name, spec in services.items()
        if spec.get("command", [None])[:2] == ["python", "-m"]
    ]


@pytest.mark.parametrize(("service", "module"), app_commands())
def test_app_container_runs_an_existing_module(service: str, module: str) -> None:
    if module.startswith("slotflow_") and not (ROOT / "services" / module.removeprefix("slotflow_")).exists():
        pytest.fail(
            f"compose service {service} runs {module}, but services/{module.removeprefix('slotflow_')} does not exist"
        )
    assert importlib.util.find_spec(module) is not None, f"{service}: module {module} not importable"


def test_the_api_container_listens_where_its_published_port_reaches() -> None:
    """Issue 23: the api listened on the container's 127.0.0.1, so the published port reached nothing."""
    api = load_compose()["services"]["api"]
    environment = api["environment"]
    assert environment["SLOTFLOW_API_HOST"] == "0.0.0.0"  # noqa: S104 - inside its container, on purpose
    # The merge keeps the shared settings every service needs.
    assert environment["SLOTFLOW_KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert "SLOTFLOW_PG_DSN" in environment
    [published] = api["ports"]
    # "127.0.0.1:${SLOTFLOW_COMPOSE_API_PORT:-8080}:8080": the host side may be a variable.
    host, _, rest = published.partition(":")
    container_port = rest.rsplit(":", 1)[1]
    assert host == "127.0.0.1"
    assert container_port == environment.get("SLOTFLOW_API_PORT", "8080")


@pytest.mark.parametrize(
    ("service", "setting"),
    [
        ("claimer", "SLOTFLOW_CLAIMER_HANDLER_MODULES"),
        ("orchestrator", "SLOTFLOW_ORCHESTRATOR_WORKFLOW_MODULES"),
    ],
)
def test_user_code_containers_name_modules_their_pythonpath_holds(service: str, setting: str) -> None:
    """A claimer without handler modules claims every run and fails it: the modules must be named and found."""
    environment = load_compose()["services"][service]["environment"]
    modules = [m.strip() for m in environment[setting].split(",") if m.strip()]
    assert modules, f"{service}: {setting} is empty"
    # The image holds the repository at /app; PYTHONPATH entries map to folders of this checkout.
    roots = [ROOT / entry.removeprefix("/app/") for entry in environment["PYTHONPATH"].split(":")]
    for module in modules:
        relative = Path(*module.split("."))
        found = [
            root
            for root in roots
            if (root / f"{relative}.py").exists() or (root / relative / "__init__.py").exists()
        ]
        assert found, f"{service}: {module} is on none of {environment['PYTHONPATH']}"


def test_every_service_waits_for_the_topic_table() -> None:
    """A clean-clone CI run failed `up --wait` with `topics-1 exited (0)`: with nothing depending
    on the one-shot job, compose waited for it to be running, and a job that finished first was a
    failure. Depending on it with service_completed_successfully fixes both that and the start order."""
    services = load_compose()["services"]
    assert services["topics"]["restart"] == "no"
    assert "topics" not in services["topics"]["depends_on"]
    long_running = [name for name in services if name not in ("kafka", "postgres", "topics")]
    assert long_running
    for name in long_running:
        condition = services[name]["depends_on"]["topics"]["condition"]
        assert condition == "service_completed_successfully", name


WORKERS = ("ticker", "claimer", "orchestrator", "dlq")


@pytest.mark.parametrize("service", WORKERS)
def test_every_worker_is_healthy_only_when_ready_on_its_own_metrics_port(service: str) -> None:
    """The workers had no health check at all; a check must ask the readiness path (not /metrics,
    which answered 200 while the event loop was blocked) on the port the service listens on."""
    spec = load_compose()["services"][service]
    port = spec["environment"][f"SLOTFLOW_{service.upper()}_METRICS_PORT"]
    # The merge keeps the shared settings every service needs.
    assert spec["environment"]["SLOTFLOW_KAFKA_BOOTSTRAP"] == "kafka:9092"
    # One shell string: podman joins a CMD array and splits it again on spaces, so
    # `python -c "import urllib..."` reached python as `-c import` (a SyntaxError, never healthy).
    kind, command = spec["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    assert f"http://127.0.0.1:{port}{READINESS_PATH}" in command, command
    assert shlex.split(command)[:2] == ["python", "-c"]
    compile(shlex.split(command)[2], "healthcheck", "exec")
