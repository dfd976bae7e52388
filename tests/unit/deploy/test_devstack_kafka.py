"""The devstack's Kafka helpers that need no broker: the cluster id it formats the data dir with."""

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from unittest import mock

import pytest

DEVSTACK = Path(__file__).resolve().parents[3] / "deploy" / "devstack"


@pytest.fixture(scope="module")
def kafka_helpers() -> Iterator[ModuleType]:
    # The devstack's modules import each other as top-level scripts (`from _config import ...`).
    sys.path.insert(0, str(DEVSTACK))
    try:
        yield importlib.import_module("_kafka")
    finally:
        sys.path.remove(str(DEVSTACK))


def test_a_cluster_id_never_starts_with_a_dash(kafka_helpers: ModuleType) -> None:
    # uuid4 bytes whose url-safe base64 starts with '-' (0xf8 -> '-' in the first six bits).
    dash_first = mock.Mock(bytes=bytes([0xF8]) + bytes(15))
    plain = mock.Mock(bytes=bytes(16))
    with mock.patch.object(kafka_helpers.uuid, "uuid4", side_effect=[dash_first, plain]):
        cluster_id = kafka_helpers.new_cluster_id()
    assert cluster_id == "AAAAAAAAAAAAAAAAAAAAAA"


def test_cluster_ids_look_like_kafkas(kafka_helpers: ModuleType) -> None:
    for _ in range(500):
        cluster_id = kafka_helpers.new_cluster_id()
        assert len(cluster_id) == 22
        assert not cluster_id.startswith("-")
