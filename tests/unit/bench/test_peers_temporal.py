"""The Temporal peer's pure parts: its command line, figures, JSON line and installer parsing.

The adapter runs in the peers' virtualenv; these parts import no temporalio, so the project's
environment tests them without it.
"""

import itertools
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[3] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from peers import install_temporal, temporal  # noqa: E402 - importable once bench/ is on the path

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def test_command_line_defaults_to_the_issue_size_and_two_workers() -> None:
    args = temporal.parse_args(["jobs", "--pg-dsn", "postgresql://x/y"])
    assert (args.workload, args.size, args.workers) == ("jobs", 20_000, 2)
    assert temporal.parse_args(["replay", "--pg-dsn", "d", "--size", "200"]).size == 200


@pytest.mark.parametrize(
    "argv", [["jobs", "--pg-dsn", "d", "--size", "0"], ["nap", "--pg-dsn", "d"], ["jobs"]]
)
def test_command_line_refuses_a_bad_size_workload_or_missing_dsn(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        temporal.parse_args(argv)


def test_result_line_is_the_contract_object() -> None:
    line = temporal.result_line(
        "jobs", 200, {"per_second": 14, "p50_ms": 8.5, "p99_ms": 12.0}, "one activity"
    )
    assert json.loads(line) == {
        "system": "temporal",
        "workload": "jobs",
        "size": 200,
        "metrics": {"per_second": 14.0, "p50_ms": 8.5, "p99_ms": 12.0},
        "notes": "one activity",
    }


def test_result_line_refuses_non_finite_figures() -> None:
    with pytest.raises(ValueError, match="p99_ms"):
        temporal.result_line("jobs", 1, {"per_second": 1.0, "p99_ms": float("nan")}, "")


def test_not_measured_line() -> None:
    assert json.loads(temporal.not_measured_line("schedules", "too slow")) == {
        "system": "temporal",
        "workload": "schedules",
        "not_measured": "too slow",
    }


def test_run_metrics_time_the_whole_run_and_each_workflow() -> None:
    executions = [
        temporal.Execution(start=T0 + timedelta(seconds=i), close=T0 + timedelta(seconds=i + 1 + i % 2))
        for i in range(10)
    ]
    metrics = temporal.run_metrics(executions, submitted_at=T0)
    # The last closes 11 s after the first submission; latencies are five 1 s and five 2 s.
    assert metrics == {"per_second": pytest.approx(10 / 11), "p50_ms": 2000.0, "p99_ms": 2000.0}


def test_run_metrics_refuse_an_empty_or_backwards_run() -> None:
    with pytest.raises(ValueError, match="no executions"):
        temporal.run_metrics([], submitted_at=T0)
    with pytest.raises(ValueError, match="precedes"):
        temporal.run_metrics([temporal.Execution(start=T0, close=T0)], submitted_at=T0 + timedelta(seconds=1))


def test_lateness_of_one_slot() -> None:
    fired = [(T0, T0 + timedelta(milliseconds=ms)) for ms in (100, 200, 300, 400)]
    metrics = temporal.lateness_metrics(fired)
    assert metrics["lateness_p50_ms"] == pytest.approx(300.0)
    assert metrics["lateness_p99_ms"] == pytest.approx(400.0)
    # Four slots worked through in the 0.4 s after they were due.
    assert metrics["slots_per_second"] == pytest.approx(10.0)


def test_next_minute_is_strictly_after() -> None:
    assert temporal.next_minute(T0) == T0 + timedelta(minutes=1)
    assert temporal.next_minute(T0 + timedelta(seconds=59, microseconds=1)) == T0 + timedelta(minutes=1)


def test_slot_condition_spans_the_slot_second_in_utc() -> None:
    assert temporal.slot_condition(T0) == (
        "TemporalScheduledStartTime >= '2026-12-05T12:00:00Z' AND TemporalScheduledStartTime < '2026-12-05T12:00:01Z'"
    )


@pytest.mark.parametrize(
    ("output", "versions"),
    [
        ("temporal version 1.5.1 (Server 1.29.1, UI 2.42.1)\n", ("1.5.1", "1.29.1")),
        # `go install` stamps no release into the binary.
        ("temporal version 0.0.0-DEV (Server 1.29.1, UI 2.42.1)\n", ("0.0.0-DEV", "1.29.1")),
    ],
)
def test_parse_version(output: str, versions: tuple[str, str]) -> None:
    assert temporal.parse_version(output) == versions


def test_parse_version_refuses_other_output() -> None:
    with pytest.raises(ValueError, match="not a temporal --version"):
        temporal.parse_version("command not found")


def test_dev_server_command_names_every_port_and_the_database_file() -> None:
    ports = temporal.DevPorts(frontend=7001, http=7002, ui=7003, metrics=7004)
    command = temporal.dev_server_command(Path("temporal"), Path("state.db"), ports)
    assert command[:3] == ["temporal", "server", "start-dev"]
    pairs = dict(itertools.pairwise(command))
    assert pairs["--port"] == "7001"
    assert pairs["--http-port"] == "7002"
    assert pairs["--ui-port"] == "7003"
    assert pairs["--metrics-port"] == "7004"
    assert pairs["--db-filename"] == "state.db"
    assert pairs["--search-attribute"] == f"{temporal.WAITING_ATTRIBUTE}=Bool"
    assert "--headless" in command


def test_extra_server_args_are_split_like_a_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(temporal.SERVER_ARGS_VARIABLE, raising=False)
    assert temporal.extra_server_args() == []
    monkeypatch.setenv(temporal.SERVER_ARGS_VARIABLE, "--sqlite-pragma 'journal_mode=WAL'")
    assert temporal.extra_server_args() == ["--sqlite-pragma", "journal_mode=WAL"]


def test_pinned_requirements_take_only_temporal_lines() -> None:
    text = "# peers\ntemporalio==1.35.0  # the SDK\ndbos==2.0.0\nprocrastinate==3.0\n"
    assert install_temporal.pinned_requirements(text) == ["temporalio==1.35.0"]


def test_pinned_requirements_refuse_an_unpinned_sdk() -> None:
    with pytest.raises(install_temporal.InstallError, match="temporalio"):
        install_temporal.pinned_requirements("temporalio>=1.0\n")


def test_the_committed_requirements_pin_temporalio() -> None:
    assert install_temporal.pinned_requirements(install_temporal.REQUIREMENTS.read_text())[0].startswith(
        "temporalio=="
    )


def test_the_adapter_runs_the_cli_release_the_installer_builds() -> None:
    assert temporal.CLI_VERSION == install_temporal.CLI_VERSION
    assert temporal.DEFAULT_CLI.parent.name == f"temporal-{install_temporal.CLI_VERSION}"
