"""SLOTFLOW_KAFKA_EXTRA_LISTENERS: further broker listeners, each advertised at another port (the
system fault suite's forwarders), and the clear refusal of a malformed value."""

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

DEVSTACK = Path(__file__).resolve().parents[3] / "deploy" / "devstack"


@pytest.fixture(scope="module")
def devstack() -> Iterator[tuple[ModuleType, ModuleType]]:
    sys.path.insert(0, str(DEVSTACK))
    try:
        yield importlib.import_module("_config"), importlib.import_module("_kafka")
    finally:
        sys.path.remove(str(DEVSTACK))


def properties(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if "=" in line and not line.startswith("#")]
    return {line.split("=", 1)[0]: line.split("=", 1)[1] for line in lines}


def test_no_extra_listener_by_default(
    devstack: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, kafka = devstack
    monkeypatch.delenv("SLOTFLOW_KAFKA_EXTRA_LISTENERS", raising=False)
    monkeypatch.setenv("SLOTFLOW_KAFKA_PORT", "25092")
    monkeypatch.setenv("SLOTFLOW_KAFKA_CONTROLLER_PORT", "25093")
    props = properties(kafka._server_properties(config.Config.from_env()))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:25092,CONTROLLER://127.0.0.1:25093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:25092"


def test_each_extra_listener_is_advertised_at_its_own_port(
    devstack: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, kafka = devstack
    monkeypatch.setenv("SLOTFLOW_KAFKA_EXTRA_LISTENERS", "SVC_TICKER_0:27200:27300, SVC_API:27201:27301")
    monkeypatch.setenv("SLOTFLOW_KAFKA_PORT", "25092")
    monkeypatch.setenv("SLOTFLOW_KAFKA_CONTROLLER_PORT", "25093")
    cfg = config.Config.from_env()
    props = properties(kafka._server_properties(cfg))
    assert props["listeners"].split(",")[2:] == [
        "SVC_TICKER_0://127.0.0.1:27200",
        "SVC_API://127.0.0.1:27201",
    ]
    assert props["advertised.listeners"].split(",")[1:] == [
        "SVC_TICKER_0://127.0.0.1:27300",
        "SVC_API://127.0.0.1:27301",
    ]
    assert "SVC_API:PLAINTEXT" in props["listener.security.protocol.map"].split(",")
    # The broker still talks to itself on its own listener, and `up` still finds its ports.
    assert props["inter.broker.listener.name"] == "PLAINTEXT"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("svc:1:2", "NAME:PORT:ADVERTISED_PORT"),
        ("SVC:1", "NAME:PORT:ADVERTISED_PORT"),
        ("SVC:one:2", "not a number"),
        ("PLAINTEXT:27200:27300", "the devstack's own listener"),
        ("SVC:25092:27300", "must differ"),
    ],
)
def test_a_malformed_value_is_refused_with_the_reason(
    devstack: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch, value: str, says: str
) -> None:
    config, _ = devstack
    monkeypatch.setenv("SLOTFLOW_KAFKA_EXTRA_LISTENERS", value)
    monkeypatch.setenv("SLOTFLOW_KAFKA_PORT", "25092")
    with pytest.raises(config.DevstackError, match=says):
        config.Config.from_env()


def test_extra_listeners_are_refused_on_the_secured_broker(
    devstack: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, _ = devstack
    monkeypatch.setenv("SLOTFLOW_KAFKA_EXTRA_LISTENERS", "SVC_API:27201:27301")
    monkeypatch.setenv("SLOTFLOW_DEVSTACK_KAFKA_SECURITY", "sasl_ssl")
    with pytest.raises(config.DevstackError, match="bypass"):
        config.Config.from_env()
