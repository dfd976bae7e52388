"""slotflow.logs masks secrets: DSN passwords in every spelling, registered values, tracebacks,
JSON lines, uncaught exceptions; settings register theirs and never print them."""

import io
import json
import logging
import sys

import pytest
from pydantic import AnyHttpUrl, SecretStr

from slotflow.logs import REDACTED, configure_logging, dsn_password, redact, register_secret
from slotflow.settings import PostgresSettings
from slotflow_api.config import ApiSettings
from slotflow_claimer.config import ClaimerSettings
from slotflow_dlq.config import DlqSettings


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "cannot connect to postgresql://svc:pa55word@db.internal:5432/slotflow?sslmode=verify-full",
            "cannot connect to postgresql://svc:***@db.internal:5432/slotflow?sslmode=verify-full",
        ),
        ("postgres://u:p%40ss:w0rd@h/d", "postgres://u:***@h/d"),
        ("'postgresql://u:hunter22@h/d'", "'postgresql://u:***@h/d'"),
        (
            "postgresql://u@h/d?password=hunter22&sslmode=require",
            "postgresql://u@h/d?password=***&sslmode=require",
        ),
        ("host=h user=u password='two words' dbname=d", "host=h user=u password=*** dbname=d"),
        ("https://hook:s3cret@example.com/in", "https://hook:***@example.com/in"),
        ("postgresql://u@h:5432/d", "postgresql://u@h:5432/d"),  # nothing to mask
        ("http://[::1]:8080/v1/health", "http://[::1]:8080/v1/health"),
    ],
)
def test_dsn_passwords_are_masked_in_every_spelling(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_dsn_password_finds_the_password() -> None:
    assert dsn_password("postgresql://u:pw%2Fx@h/d") == "pw%2Fx"
    assert dsn_password("postgresql://u@h/d?password=q1w2") == "q1w2"
    assert dsn_password("postgresql://u@h/d") is None


def test_a_registered_secret_is_masked_on_its_own_and_percent_decoded() -> None:
    register_secret(SecretStr("tok_live_9f8e7d"))
    register_secret("p%40ssw0rd-reg")
    assert redact("bearer tok_live_9f8e7d refused") == f"bearer {REDACTED} refused"
    assert redact("p@ssw0rd-reg and p%40ssw0rd-reg") == f"{REDACTED} and {REDACTED}"


def test_a_short_value_is_not_masked_by_value() -> None:
    register_secret("ab")
    assert redact("tab stab") == "tab stab"


def test_postgres_settings_register_their_passwords_and_print_none() -> None:
    settings = PostgresSettings(dsn="postgresql://svc:dsn-secret-1@h/d", password=SecretStr("env-secret-2"))
    assert "dsn-secret-1" not in repr(settings)
    assert "env-secret-2" not in repr(settings)
    assert settings.display_dsn == "postgresql://svc:***@h/d"
    assert settings.connect_kwargs() == {"password": "env-secret-2"}
    assert redact("dsn-secret-1 env-secret-2") == f"{REDACTED} {REDACTED}"


def test_service_settings_register_their_secrets() -> None:
    ClaimerSettings(handler_dsn="postgresql://h:handler-secret-3@h/d")
    DlqSettings(
        webhook_secret=SecretStr("hmac-secret-4"),
        webhook_url=AnyHttpUrl("https://u:url-secret-5@hooks.example/x"),
    )
    ApiSettings(bootstrap_token=SecretStr("sft_bootstrap-secret-10-" + "x" * 20))
    assert redact("handler-secret-3 hmac-secret-4 url-secret-5") == " ".join([REDACTED] * 3)
    assert redact("Bearer sft_bootstrap-secret-10-" + "x" * 20) == f"Bearer {REDACTED}"


def _log_with(monkeypatch: pytest.MonkeyPatch, fmt: str) -> str:
    monkeypatch.setenv("SLOTFLOW_LOG_FORMAT", fmt)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    register_secret('quote"and\\slash-secret')
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging(stream=out, force=True)
        log = logging.getLogger("slotflow.test")
        try:
            raise ConnectionError("connect to postgresql://svc:in-traceback-6@h/d failed")
        except ConnectionError:
            log.exception(
                "retrying %s",
                "postgresql://svc:in-args-7@h/d",
                extra={"dsn": "postgresql://svc:in-extra-8@h/d", "token": 'quote"and\\slash-secret'},
            )
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_lines_mask_message_extras_and_traceback(monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    output = _log_with(monkeypatch, fmt)
    for secret in ("in-traceback-6", "in-args-7", "in-extra-8", "quote", "slash-secret"):
        assert secret not in output, (secret, output)
    assert "postgresql://svc:***@h/d" in output
    if fmt == "json":
        entry = json.loads(output)
        assert entry["token"] == REDACTED
        assert "ConnectionError" in entry["traceback"]


def test_an_uncaught_exception_is_masked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging(stream=io.StringIO(), force=True)
        try:
            raise OSError("postgresql://svc:uncaught-9@h/d unreachable")
        except OSError as err:
            sys.excepthook(type(err), err, err.__traceback__)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    err_text = capsys.readouterr().err
    assert "uncaught-9" not in err_text
    assert "postgresql://svc:***@h/d unreachable" in err_text
