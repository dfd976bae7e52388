"""The query listener's settings: no listener beyond this host without a token, and the address
the api is given."""

import socket

import pytest
from pydantic import SecretStr, ValidationError

from slotflow.logs import redact
from slotflow_orchestrator.config import OrchestratorSettings


def test_a_listener_beyond_the_loopback_needs_a_token() -> None:
    with pytest.raises(ValidationError, match="SLOTFLOW_ORCHESTRATOR_QUERY_TOKEN"):
        OrchestratorSettings(query_port=9341, query_host="0.0.0.0")  # noqa: S104
    OrchestratorSettings(query_port=9341, query_host="127.0.0.1")  # this host only: no token needed
    OrchestratorSettings(query_port=0, query_host="0.0.0.0")  # noqa: S104 - no listener at all


def test_the_address_given_to_the_api() -> None:
    local = OrchestratorSettings(query_port=9341)
    assert local.query_url() == "http://127.0.0.1:9341"
    everywhere = OrchestratorSettings(query_port=9341, query_host="0.0.0.0", query_token=SecretStr("t" * 32))  # noqa: S104
    assert everywhere.query_url() == f"http://{socket.gethostbyname(socket.gethostname())}:9341"
    told = OrchestratorSettings(query_port=9341, query_address="http://10.0.3.7:9341")
    assert told.query_url() == "http://10.0.3.7:9341"
    ipv6 = OrchestratorSettings(query_port=9341, query_host="::1")
    assert ipv6.query_url() == "http://[::1]:9341"


def test_the_token_never_reaches_a_log_line() -> None:
    token = "q" * 40
    OrchestratorSettings(query_port=9341, query_host="0.0.0.0", query_token=SecretStr(token))  # noqa: S104
    assert token not in redact(f"asked with Bearer {token}")
