"""`slotflow db bootstrap-roles` without a database: --print writes the script as one
transaction; a bad prefix or no connection to use is a usage error (exit 2) with a message."""

import pytest

from slotflow.cli.__main__ import main


def test_print_writes_the_script_as_one_transaction(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "bootstrap-roles", "--print", "--prefix", "acme_"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("BEGIN;\n")
    assert out.endswith("COMMIT;\n")
    assert 'CREATE ROLE "acme_claimer" LOGIN' in out


def test_a_bad_prefix_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "bootstrap-roles", "--print", "--prefix", "Acme"]) == 2
    assert "role prefix 'Acme'" in capsys.readouterr().err


def test_no_connection_exits_2_naming_the_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLOTFLOW_PG_ADMIN_DSN", raising=False)
    monkeypatch.delenv("SLOTFLOW_PG_DSN", raising=False)
    assert main(["db", "bootstrap-roles"]) == 2
    assert "pass --dsn or set SLOTFLOW_PG_ADMIN_DSN" in capsys.readouterr().err
