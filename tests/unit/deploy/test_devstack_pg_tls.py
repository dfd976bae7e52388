"""The devstack's SLOTFLOW_PG_TLS setting: the exported DSN asks for verify-full against the
devstack's CA, the server's settings turn TLS on, and a value that is not a flag is refused."""

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
        yield importlib.import_module("_config"), importlib.import_module("_postgres")
    finally:
        sys.path.remove(str(DEVSTACK))


def test_tls_off_is_the_default_and_changes_nothing(
    devstack: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, postgres = devstack
    monkeypatch.delenv("SLOTFLOW_PG_TLS", raising=False)
    monkeypatch.setenv("SLOTFLOW_PG_PORT", "25432")
    cfg = config.Config.from_env()
    assert cfg.dsn == "postgresql://slotflow@127.0.0.1:25432/slotflow"
    assert "ssl" not in postgres._pg_conf(cfg)


def test_tls_on_exports_verify_full_and_serves_the_devstack_certificate(
    devstack: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config, postgres = devstack
    monkeypatch.setenv("SLOTFLOW_PG_TLS", "1")
    monkeypatch.setenv("SLOTFLOW_PG_PORT", "25432")
    monkeypatch.setenv("SLOTFLOW_DEVSTACK_DIR", str(tmp_path / "state dir"))
    cfg = config.Config.from_env()
    assert cfg.pg_tls
    ca = tmp_path / "state dir" / "pg-tls" / "ca.crt"
    assert cfg.pg_ca_cert == ca
    # The space in the path is percent-encoded: the DSN stays one URL.
    expected_root = str(ca).replace(" ", "%20")
    assert cfg.dsn == (
        f"postgresql://slotflow@127.0.0.1:25432/slotflow?sslmode=verify-full&sslrootcert={expected_root}"
    )
    conf = postgres._pg_conf(cfg)
    assert "ssl = on" in conf.splitlines()
    assert f"ssl_cert_file = '{cfg.pg_server_tls_dir / 'server.crt'}'" in conf
    assert f"ssl_key_file = '{cfg.pg_server_tls_dir / 'server.key'}'" in conf


@pytest.mark.parametrize("value", ["maybe", "2", "tls"])
def test_a_value_that_is_not_a_flag_is_refused(
    devstack: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    config, _ = devstack
    monkeypatch.setenv("SLOTFLOW_PG_TLS", value)
    with pytest.raises(config.DevstackError, match=r"SLOTFLOW_PG_TLS=.*expected 1 or 0"):
        config.Config.from_env()
