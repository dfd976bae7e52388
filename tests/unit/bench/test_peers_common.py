"""What the adapters share (their command line and JSON line) and the installers' pure parts."""

import json
import subprocess
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit


def test_adapter_arguments_and_default_sizes(common: ModuleType) -> None:
    args = common.parse_args("x", ["jobs", "--pg-dsn", "postgresql://h/db"])
    assert (args.workload, args.size, args.workers, args.kafka_bootstrap) == ("jobs", 20_000, 2, None)
    args = common.parse_args("x", ["replay", "--size", "300", "--pg-dsn", "d", "--workers", "3"])
    assert (args.size, args.workers) == (300, 3)
    with pytest.raises(SystemExit):
        common.parse_args("x", ["cooking", "--pg-dsn", "d"])
    with pytest.raises(SystemExit):
        common.parse_args("x", ["jobs", "--pg-dsn", "d", "--size", "0"])


def test_result_and_not_measured_lines(common: ModuleType) -> None:
    data = json.loads(common.result("bare", "jobs", 10, {"per_second": 3}, "notes"))
    assert data == {
        "system": "bare",
        "workload": "jobs",
        "size": 10,
        "metrics": {"per_second": 3.0},
        "notes": "notes",
    }
    assert json.loads(common.not_measured("bare", "replay", "why")) == {
        "system": "bare",
        "workload": "replay",
        "not_measured": "why",
    }
    with pytest.raises(ValueError, match="non-finite"):
        common.result("bare", "jobs", 10, {"per_second": float("inf")})


def test_latency_metrics(common: ModuleType) -> None:
    latencies = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    metrics = common.latency_metrics(latencies, 100, 2.0, extra=1.0)
    assert metrics == {"per_second": 50.0, "p50_ms": pytest.approx(51.0), "p99_ms": 100.0, "extra": 1.0}
    with pytest.raises(ValueError, match="positive"):
        common.latency_metrics(latencies, 100, 0.0)
    with pytest.raises(ValueError, match="no values"):
        common.percentile([], 0.5)


def test_pins_and_their_digest(install: ModuleType) -> None:
    text = "# peers\ntemporalio==1.2.3  # the SDK\n\nDBOS == 2.0\nsomething>=1\n"
    assert install.pinned(text) == {"temporalio": "1.2.3", "dbos": "2.0"}
    assert install.requirements_digest(text) == install.requirements_digest(text)
    assert install.requirements_digest(text) != install.requirements_digest(text + "x==1\n")


def test_unknown_systems_are_unavailable_with_the_known_ones_named(install: ModuleType) -> None:
    answer = install.install("cooking")
    assert set(answer) == {"unavailable"}
    assert "slotflow" in answer["unavailable"]
    assert {"slotflow", "bare", "temporal", "dbos", "procrastinate"} <= set(install.INSTALLERS)


def test_a_failed_command_is_named_with_its_error(install: ModuleType) -> None:
    error = subprocess.CalledProcessError(1, ["pip"], output="", stderr="line 1\nERROR: no such version\n")
    answer = install.failed_command(
        [f"{install.REPO}/.cache/bench/peers-venv/bin/python", "-m", "pip"], error
    )
    assert answer == {
        "unavailable": "`.cache/bench/peers-venv/bin/python -m pip` exited with 1: line 1 / ERROR: no such version"
    }
    missing = install.failed_command(["temporal"], FileNotFoundError("no temporal"))
    assert missing == {"unavailable": "`temporal` could not run: no temporal"}
