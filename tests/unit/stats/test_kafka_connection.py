"""The stats worker's Kafka settings: the same variables as the library's, handed to aiokafka."""

import pytest
from pydantic import ValidationError

from slotflow_stats.config import KafkaConnection


def test_plaintext_by_default() -> None:
    options = KafkaConnection(bootstrap="b:1").client_options()
    assert options == {"bootstrap_servers": "b:1", "security_protocol": "PLAINTEXT"}


def test_scram_over_tls_gives_aiokafka_a_context_and_the_credentials() -> None:
    kafka = KafkaConnection(
        bootstrap="b:1",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="stats",
        sasl_password="pw",  # type: ignore[arg-type]
    )
    options = kafka.client_options()
    assert (options["sasl_mechanism"], options["sasl_plain_username"], options["sasl_plain_password"]) == (
        "SCRAM-SHA-512",
        "stats",
        "pw",
    )
    assert options["ssl_context"].check_hostname
    assert "pw" not in repr(kafka)


async def test_oauthbearer_takes_the_static_token() -> None:
    kafka = KafkaConnection(
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token="t0k",  # type: ignore[arg-type]
    )
    assert await kafka.client_options()["sasl_oauth_token_provider"].token() == "t0k"


@pytest.mark.parametrize(
    "values",
    [
        {"security_protocol": "SASL_SSL"},
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"},
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"},
    ],
)
def test_incomplete_sasl_settings_are_refused(values: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match=r"SLOTFLOW_KAFKA|OAUTHBEARER"):
        KafkaConnection(**values)  # type: ignore[arg-type]
