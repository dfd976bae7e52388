"""The one settings base of the services: the shared fields under one name in each, and a renamed
variable still read under its former name, with a deprecation warning."""

import logging
import os

import pytest

from slotflow.settings import ServiceSettings, WorkerSettings
from slotflow_api.config import ApiSettings
from slotflow_claimer.config import ClaimerSettings
from slotflow_dlq.config import DlqSettings
from slotflow_orchestrator.config import OrchestratorSettings
from slotflow_ticker.config import TickerSettings

SERVICES: dict[str, type[ServiceSettings]] = {
    "TICKER": TickerSettings,
    "CLAIMER": ClaimerSettings,
    "ORCHESTRATOR": OrchestratorSettings,
    "DLQ": DlqSettings,
    "API": ApiSettings,
}
#: The variables renamed into `POOL_SIZE`, each still read.
FORMER_POOL_NAMES = {
    "CLAIMER": "SLOTFLOW_CLAIMER_POOL_MAX_SIZE",
    "ORCHESTRATOR": "SLOTFLOW_ORCHESTRATOR_POOL_MAX_SIZE",
    "API": "SLOTFLOW_PG_POOL_MAX_SIZE",
}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SLOTFLOW_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_service_reads_the_shared_fields_under_the_same_names(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"SLOTFLOW_{service}_POOL_SIZE", "7")
    monkeypatch.setenv(f"SLOTFLOW_{service}_METRICS_PORT", "9399")
    monkeypatch.setenv(f"SLOTFLOW_{service}_METRICS_HOST", "0.0.0.0")  # noqa: S104 - a value read back
    monkeypatch.setenv(f"SLOTFLOW_{service}_EVENT_LOOP", "asyncio")
    settings = SERVICES[service]()
    assert isinstance(settings, ServiceSettings)
    assert (settings.pool_size, settings.metrics_port, settings.metrics_host, settings.event_loop) == (
        7,
        9399,
        "0.0.0.0",  # noqa: S104
        "asyncio",
    )


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_metrics_are_off_unless_the_deployment_picks_a_port(service: str) -> None:
    assert SERVICES[service]().metrics_port == 0


@pytest.mark.parametrize("service", sorted(FORMER_POOL_NAMES))
def test_a_former_name_is_still_read_and_warned_about(
    service: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    former = FORMER_POOL_NAMES[service]
    monkeypatch.setenv(former, "9")
    with caplog.at_level(logging.WARNING, logger="slotflow_base.settings"):
        settings = SERVICES[service]()
    assert settings.pool_size == 9
    assert f"{former} is deprecated: set SLOTFLOW_{service}_POOL_SIZE instead" in caplog.text


@pytest.mark.parametrize("service", sorted(FORMER_POOL_NAMES))
def test_the_new_name_wins_over_the_former_and_nothing_is_warned(
    service: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(FORMER_POOL_NAMES[service], "9")
    monkeypatch.setenv(f"SLOTFLOW_{service}_POOL_SIZE", "4")
    with caplog.at_level(logging.WARNING, logger="slotflow_base.settings"):
        settings = SERVICES[service]()
    assert settings.pool_size == 4
    assert "deprecated" not in caplog.text


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_a_renamed_field_is_still_set_by_its_name_in_code(service: str) -> None:
    assert SERVICES[service](pool_size=3).pool_size == 3


def test_a_bad_pool_size_is_refused_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOTFLOW_CLAIMER_POOL_MAX_SIZE", "1")
    with pytest.raises(ValueError, match="POOL"):
        ClaimerSettings()


@pytest.mark.parametrize("service", sorted(set(SERVICES) - {"API"}))
def test_every_worker_reads_its_liveness_threshold_and_the_api_has_none(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers' /livez (slotflow.health); the api's probes are routes of its own app."""
    default = SERVICES[service]()
    assert isinstance(default, WorkerSettings)
    assert default.liveness_stall_seconds == 30.0
    monkeypatch.setenv(f"SLOTFLOW_{service}_LIVENESS_STALL_SECONDS", "12.5")
    settings = SERVICES[service]()
    assert isinstance(settings, WorkerSettings)
    assert settings.liveness_stall_seconds == 12.5
    assert "liveness_stall_seconds" not in ApiSettings.model_fields
