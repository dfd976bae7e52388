"""The stats worker's settings are the library's own definitions (slotflow_base): the same
variables, the same checks, and their secrets registered for masking as every service's are."""

import pytest
from pydantic import ValidationError

from slotflow_base.logs import REDACTED, redact
from slotflow_base.settings import KafkaConnection, PostgresSettings
from slotflow_base.stats.settings import StatsSchemaSettings
from slotflow_stats.config import Settings, StatsSettings


def test_the_worker_reads_the_shared_kafka_and_postgres_settings() -> None:
    settings = Settings()
    assert type(settings.kafka) is KafkaConnection
    assert type(settings.postgres) is PostgresSettings
    # The schema the worker writes is the setting the api reads it by.
    assert issubclass(StatsSettings, StatsSchemaSettings)


def test_its_secrets_are_masked_once_the_settings_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "SLOTFLOW_PG_PASSWORD": "stats-env-pw-0b7e",
        "SLOTFLOW_KAFKA_SASL_PASSWORD": "stats-sasl-pw-91c2",
    }
    monkeypatch.setenv("SLOTFLOW_PG_DSN", "postgresql://slotflow_stats:stats-dsn-pw-44d1@db/slotflow")
    monkeypatch.setenv("SLOTFLOW_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("SLOTFLOW_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("SLOTFLOW_KAFKA_SASL_USERNAME", "stats")
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    options = settings.kafka.client_options()
    assert options["sasl_plain_password"] == "stats-sasl-pw-91c2"
    line = f"{options} {settings.postgres.connect_kwargs()} stats-dsn-pw-44d1"
    assert redact(line).count(REDACTED) == 3
    assert not any(secret in redact(line) for secret in [*secrets.values(), "stats-dsn-pw-44d1"])


def test_a_refused_kafka_setting_quotes_none_of_its_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    # pydantic quotes the input it refuses, cut to its first and last 25 characters: a piece of
    # the last secret, which no mask of the whole value would catch. The settings hide it.
    key_password = "stats-key-pw-" + "7f3a9c" * 6
    monkeypatch.setenv("SLOTFLOW_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("SLOTFLOW_KAFKA_SASL_MECHANISM", "PLAIN")
    monkeypatch.setenv("SLOTFLOW_KAFKA_SASL_PASSWORD", "stats-refused-pw-5a0f")
    monkeypatch.setenv("SLOTFLOW_KAFKA_SSL_KEY_PASSWORD", key_password)
    with pytest.raises(ValidationError, match="SLOTFLOW_KAFKA_SASL_USERNAME") as refused:
        Settings()
    message = str(refused.value)
    assert "stats-refused-pw-5a0f" not in message
    assert "7f3a9c7f3a9c" not in message


@pytest.mark.parametrize(
    "values",
    [
        {"security_protocol": "SASL_SSL"},
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"},
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"},
        {"security_protocol": "PLAINTEXT", "sasl_mechanism": "PLAIN"},
    ],
)
def test_incomplete_sasl_settings_are_refused(
    monkeypatch: pytest.MonkeyPatch, values: dict[str, str]
) -> None:
    for name, value in values.items():
        monkeypatch.setenv(f"SLOTFLOW_KAFKA_{name.upper()}", value)
    with pytest.raises(ValidationError, match=r"SLOTFLOW_KAFKA"):
        Settings()
