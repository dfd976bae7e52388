"""Every HTTP and metrics listener binds the loopback unless a setting exposes it: none of them
authenticates a scraper (docs/operations.md)."""

import pytest
from pydantic_settings import BaseSettings

from slotflow_api.config import ApiSettings
from slotflow_claimer.config import ClaimerSettings
from slotflow_dlq.config import DlqSettings
from slotflow_orchestrator.config import OrchestratorSettings
from slotflow_ticker.config import TickerSettings

LISTENERS: list[tuple[type[BaseSettings], str]] = [
    (ApiSettings, "host"),
    (ClaimerSettings, "metrics_host"),
    (DlqSettings, "metrics_host"),
    (OrchestratorSettings, "metrics_host"),
    (TickerSettings, "metrics_host"),
]


@pytest.mark.parametrize(("settings", "field"), LISTENERS, ids=lambda v: getattr(v, "__name__", v))
def test_a_listener_binds_the_loopback_by_default(settings: type[BaseSettings], field: str) -> None:
    assert settings.model_fields[field].default == "127.0.0.1"
