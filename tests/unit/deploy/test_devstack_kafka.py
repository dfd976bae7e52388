"""The devstack's Kafka helpers that need no broker: the cluster id it formats the data dir with, and
the server.properties of each security mode."""

import importlib
import json
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
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


def _config(kafka_helpers: ModuleType, tmp_path: Path, security: str) -> object:
    config: type = kafka_helpers.Config
    return config(
        state_dir=tmp_path,
        cache_dir=tmp_path / "cache",
        kafka_port=23192,
        controller_port=23193,
        pg_port=23194,
        kafka_security=security,
    )


def test_the_plaintext_broker_keeps_its_listener_and_no_authoriser(
    kafka_helpers: ModuleType, tmp_path: Path
) -> None:
    properties = kafka_helpers._server_properties(_config(kafka_helpers, tmp_path, "plaintext"))
    assert "listeners=PLAINTEXT://127.0.0.1:23192,CONTROLLER://127.0.0.1:23193" in properties
    assert "authorizer" not in properties
    (tmp_path / "server.properties").write_text(properties)
    assert kafka_helpers.listener_ports(tmp_path / "server.properties") == (23192, 23193)


def test_the_sasl_ssl_broker_authorises_and_hides_its_passwords(
    kafka_helpers: ModuleType, tmp_path: Path
) -> None:
    cfg: Any = _config(kafka_helpers, tmp_path, "sasl_ssl")
    properties = kafka_helpers._server_properties(cfg)
    assert "listeners=SASL_SSL://127.0.0.1:23192,CONTROLLER://127.0.0.1:23193" in properties
    assert "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" in properties
    assert "allow.everyone.if.no.acl.found=false" in properties
    (tmp_path / "server.properties").write_text(properties)
    assert kafka_helpers.listener_ports(tmp_path / "server.properties") == (23192, 23193)
    users = json.loads(cfg.kafka_users_file.read_text())
    assert set(users) == {"admin", "ticker", "claimer", "orchestrator", "dlq", "api", "stats", "cli"}
    assert stat.S_IMODE(cfg.kafka_users_file.stat().st_mode) == 0o600
    security = importlib.import_module("_kafka_security")
    arguments = security.format_arguments(cfg)
    assert arguments.count("--add-scram") == 2 * len(users)
    failed = f"format failed: {' '.join(arguments)}"
    assert all(password not in security.redact(failed, cfg) for password in users.values())
