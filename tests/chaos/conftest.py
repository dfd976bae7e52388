"""Fixtures every chaos test may use: the service processes a test started, closed at its end."""

from collections.abc import Iterator

import pytest

from slotflow.testing.processes import ProcessGroup


@pytest.fixture
def processes() -> Iterator[ProcessGroup]:
    group = ProcessGroup()
    yield group
    group.close()
