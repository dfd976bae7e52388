"""The fault suite's harness runs on uvloop: its fault proxies move every byte between the services
and Kafka and PostgreSQL, most of the harness's CPU, and libuv's transports cost less per write than
asyncio's own. On two cores the harness competes with the system it measures."""

from collections.abc import Callable, Mapping
from typing import Any

import pytest
import uvloop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], Any]]:
    return {"uvloop": uvloop.new_event_loop}
