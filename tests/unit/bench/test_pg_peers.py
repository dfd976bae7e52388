"""The pure parts of the PostgreSQL-backed peer adapters (bench/peers): statistics, result objects,
DSNs, cron arithmetic, the command line and the installer's caching; no database, no peer package."""

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture(scope="module")
def common() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("peers.pg_peer_common")
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def installer() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("peers.install_pgpeers")
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def dbos_adapter() -> Iterator[ModuleType]:
    """bench/peers/dbos.py loaded by path, under a name that cannot shadow the DBOS package; it
    imports no DBOS at load (only inside its functions) and edits sys.path, restored afterwards."""
    saved = list(sys.path)
    spec = importlib.util.spec_from_file_location("dbos_peer_adapter", BENCH / "peers" / "dbos.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path[:] = saved


def test_percentile_is_nearest_rank_like_the_other_benchmarks(common: ModuleType) -> None:
    values = [float(v) for v in range(1, 101)]
    assert common.percentile(values, 0.50) == 51.0
    assert common.percentile(values, 0.99) == 100.0
    assert common.percentile([7.0], 0.99) == 7.0
    with pytest.raises(ValueError, match="no values"):
        common.percentile([], 0.5)


def test_latency_metrics_use_the_contract_names(common: ModuleType) -> None:
    assert common.latency_metrics([1.0, 2.0, 3.0]) == {"p50_ms": 2.0, "p99_ms": 3.0}
    assert set(common.latency_metrics([1.0], prefix="lateness_")) == {"lateness_p50_ms", "lateness_p99_ms"}


def test_rate_refuses_an_empty_span(common: ModuleType) -> None:
    assert common.rate(300, 10.0, 12.0) == 150.0
    with pytest.raises(ValueError, match="no time elapsed"):
        common.rate(1, 5.0, 5.0)


def test_results_have_the_contract_shape(common: ModuleType) -> None:
    done = common.measured("dbos", "jobs", 300, {"per_second": 1.0}, "why")
    assert done == {
        "system": "dbos",
        "workload": "jobs",
        "size": 300,
        "metrics": {"per_second": 1.0},
        "notes": "why",
    }
    skipped = common.not_measured("procrastinate", "replay", "no history")
    assert skipped == {"system": "procrastinate", "workload": "replay", "not_measured": "no history"}


def test_emit_prints_one_json_line_last(common: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    sys.stdout.write("worker chatter\n")
    common.emit(common.not_measured("dbos", "replay", "none"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == '{"not_measured": "none", "system": "dbos", "workload": "replay"}'


def test_with_database_keeps_query_parameters_with_slashes(common: ModuleType) -> None:
    dsn = "postgresql://u@h:5432/slotflow?sslrootcert=/etc/ca.pem"
    assert common.with_database(dsn, "peer_1") == "postgresql://u@h:5432/peer_1?sslrootcert=/etc/ca.pem"
    assert common.with_database("postgresql://u@h/slotflow", "x") == "postgresql://u@h/x"


def test_next_minute_boundary_is_strictly_after(common: ModuleType) -> None:
    assert common.next_minute_boundary(120.0) == 180
    assert common.next_minute_boundary(119.9) == 120
    assert common.next_minute_boundary(0.0) == 60


def test_adapter_arguments_follow_the_contract(common: ModuleType) -> None:
    args = common.adapter_arguments("dbos", ["jobs", "--pg-dsn", "postgresql://x/y"])
    assert (args.workload, args.size, args.workers) == ("jobs", 20000, 2)
    args = common.adapter_arguments(
        "dbos", ["schedules", "--size", "1000", "--pg-dsn", "d", "--kafka-bootstrap", "h:1", "--workers", "3"]
    )
    assert (args.size, args.workers, args.kafka_bootstrap) == (1000, 3, "h:1")
    with pytest.raises(SystemExit):
        common.adapter_arguments("dbos", ["jobs", "--size", "0", "--pg-dsn", "d"])
    with pytest.raises(SystemExit):
        common.adapter_arguments("dbos", ["dance", "--pg-dsn", "d"])


def test_dbos_scheduled_run_ids_end_with_the_utc_minute(dbos_adapter: ModuleType) -> None:
    assert dbos_adapter.scheduled_workflow_suffix(1_800_000_000) == "-2027-01-15T08:00:00+00:00"


def test_dbos_gets_a_psycopg3_sqlalchemy_url(dbos_adapter: ModuleType) -> None:
    assert dbos_adapter.sqlalchemy_url("postgresql://u@h:1/db?x=1") == "postgresql+psycopg://u@h:1/db?x=1"
    with pytest.raises(ValueError, match="not a PostgreSQL DSN"):
        dbos_adapter.sqlalchemy_url("mysql://u@h/db")


def test_installer_stamp_changes_with_the_requirements(installer: ModuleType, tmp_path: Path) -> None:
    first = installer.stamp_path(tmp_path, "dbos==1\n")
    assert first == installer.stamp_path(tmp_path, "dbos==1\n")
    assert first != installer.stamp_path(tmp_path, "dbos==2\n")
    assert first.parent == tmp_path / "peers-venv"


def test_installer_reports_an_unusable_install_as_unavailable(
    installer: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(installer, "ensure_installed", lambda cache_dir: "`pip install` exited 1: no network")
    assert installer.install_dbos(tmp_path) == {
        "unavailable": "dbos could not be installed: `pip install` exited 1: no network"
    }
    monkeypatch.setattr(installer, "ensure_installed", lambda cache_dir: None)
    monkeypatch.setattr(installer, "run", lambda command: None)
    assert installer.install_procrastinate(tmp_path) == {
        "python": str(tmp_path / "peers-venv" / "bin" / "python"),
        "env": {"PYTHONUNBUFFERED": "1"},
    }


def test_the_harness_names_the_pinned_version(
    install: ModuleType, installer: ModuleType, tmp_path: Path
) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        "# peers\nDBOS==3.4.0  # the pin\nprocrastinate==3.10.0\npsycopg[binary,pool]==3.3.9\n"
    )
    ready = {"python": "python", "env": {}}
    assert install.with_pinned_version(ready, "dbos", requirements)["version"] == "dbos 3.4.0"
    assert (
        install.with_pinned_version(ready, "procrastinate", requirements)["version"] == "procrastinate 3.10.0"
    )
    assert install.with_pinned_version(ready, "temporalio", requirements)["version"] == "temporalio unpinned"
    assert install.with_pinned_version({"unavailable": "no"}, "dbos", requirements) == {"unavailable": "no"}
    committed = installer.REQUIREMENTS
    assert install.with_pinned_version(ready, "dbos", committed)["version"] != "dbos unpinned"
    assert (
        install.with_pinned_version(ready, "procrastinate", committed)["version"] != "procrastinate unpinned"
    )
