"""The devstack's Kafka helpers that need no broker: the cluster id it formats the data dir with, and
the server.properties of each security mode."""

import dataclasses
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
    # The controller listener takes the admin only (SASL_SSL, PLAIN): no anonymous super user.
    lines = dict(
        line.split("=", 1) for line in properties.splitlines() if "=" in line and not line.startswith("#")
    )
    assert lines["listener.security.protocol.map"].startswith("CONTROLLER:SASL_SSL,")
    assert lines["sasl.mechanism.controller.protocol"] == "PLAIN"
    assert lines["listener.name.controller.sasl.enabled.mechanisms"] == "PLAIN"
    assert lines["super.users"] == "User:admin"
    assert "ANONYMOUS" not in properties
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


def _config_module() -> ModuleType:
    return importlib.import_module("_config")


def test_the_test_listeners_serve_every_protocol_and_mechanism(
    kafka_helpers: ModuleType, tmp_path: Path
) -> None:
    listeners = _config_module().MechanismListeners(23195, 23196, 23197)
    base: Any = _config(kafka_helpers, tmp_path, "sasl_ssl")
    cfg: Any = dataclasses.replace(base, mechanism_listeners=listeners)
    properties = kafka_helpers._server_properties(cfg)
    lines = dict(
        line.split("=", 1) for line in properties.splitlines() if "=" in line and not line.startswith("#")
    )
    assert lines["listeners"] == (
        "SASL_SSL://127.0.0.1:23192,CONTROLLER://127.0.0.1:23193,MECHS://127.0.0.1:23195,"
        "CLEARSASL://127.0.0.1:23196,MTLS://127.0.0.1:23197"
    )
    assert lines["advertised.listeners"].endswith(
        ",MECHS://127.0.0.1:23195,CLEARSASL://127.0.0.1:23196,MTLS://127.0.0.1:23197"
    )
    assert lines["listener.security.protocol.map"].endswith(
        ",MECHS:SASL_SSL,CLEARSASL:SASL_PLAINTEXT,MTLS:SSL"
    )
    assert (
        lines["listener.name.mechs.sasl.enabled.mechanisms"]
        == "PLAIN,SCRAM-SHA-512,SCRAM-SHA-256,OAUTHBEARER"
    )
    assert lines["listener.name.clearsasl.sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-512,SCRAM-SHA-256"
    # PLAIN: every devstack user with its password; OAUTHBEARER: no validator class, so Kafka's
    # unsecured validator checks the tokens.
    users = json.loads(cfg.kafka_users_file.read_text())
    plain = lines["listener.name.mechs.plain.sasl.jaas.config"]
    assert all(f'user_{name}="{password}"' in plain for name, password in users.items())
    assert "OAuthBearerLoginModule" in lines["listener.name.mechs.oauthbearer.sasl.jaas.config"]
    assert "oauthbearer.sasl.server.callback.handler.class" not in properties
    assert lines["listener.name.mtls.ssl.client.auth"] == "required"
    assert lines["listener.name.mtls.ssl.principal.mapping.rules"] == "RULE:^CN=([^,]+)(,.*)?$/$1/,DEFAULT"
    assert lines["ssl.client.auth"] == "none"  # the devstack's own SASL_SSL listener is unchanged
    (tmp_path / "server.properties").write_text(properties)
    assert kafka_helpers.listener_ports(tmp_path / "server.properties") == (23192, 23193)


def test_without_the_test_listeners_only_sasl_ssl_is_served(
    kafka_helpers: ModuleType, tmp_path: Path
) -> None:
    properties = kafka_helpers._server_properties(_config(kafka_helpers, tmp_path, "sasl_ssl"))
    assert "MECHS" not in properties
    assert "OAUTHBEARER" not in properties
    # PLAIN only where KRaft's controller needs it, on the controller's own listener.
    plain = [line for line in properties.splitlines() if "PlainLoginModule" in line]
    assert [line.split("=", 1)[0] for line in plain] == ["listener.name.controller.plain.sasl.jaas.config"]


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS": "1,2"}, "expected three port numbers"),
        ({"SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS": "1,x,3"}, "expected three port numbers"),
        ({"SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS": "1,2,70000"}, "outside 1..65535"),
        (
            {"SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS": "24001,24002,24003"},
            "needs SLOTFLOW_DEVSTACK_KAFKA_SECURITY",
        ),
        (
            {
                "SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS": "24001,24002,19092",
                "SLOTFLOW_DEVSTACK_KAFKA_SECURITY": "sasl_ssl",
            },
            "must differ",
        ),
    ],
)
def test_bad_test_listener_ports_are_refused(
    kafka_helpers: ModuleType, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], error: str
) -> None:
    for name in (
        "SLOTFLOW_KAFKA_PORT",
        "SLOTFLOW_KAFKA_CONTROLLER_PORT",
        "SLOTFLOW_PG_PORT",
        "SLOTFLOW_DEVSTACK_KAFKA_SECURITY",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = _config_module()
    with pytest.raises(config.DevstackError, match=error):
        config.Config.from_env()


def test_the_test_listener_ports_come_from_the_environment(
    kafka_helpers: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLOTFLOW_DEVSTACK_KAFKA_SECURITY", "sasl_ssl")
    monkeypatch.setenv("SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS", " 24001, 24002 ,24003")
    config = _config_module()
    assert config.Config.from_env().mechanism_listeners == config.MechanismListeners(24001, 24002, 24003)


def test_the_secured_devstack_requires_signed_commands_and_the_plaintext_one_does_not(
    kafka_helpers: ModuleType, tmp_path: Path
) -> None:
    secured: Any = _config(kafka_helpers, tmp_path / "secured", "sasl_ssl")
    kafka_helpers._server_properties(secured)  # writes the users file the export lines read
    assert "export SLOTFLOW_COMMAND_SIGNATURES=required\n" in secured.env_lines()
    plain: Any = _config(kafka_helpers, tmp_path / "plain", "plaintext")
    assert "SLOTFLOW_COMMAND_SIGNATURES" not in plain.env_lines()
