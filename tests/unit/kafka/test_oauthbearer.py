"""The OAUTHBEARER client exchange (RFC 7628) slotflow installs into aiokafka, and how a refused
login or client certificate is told apart from an unreachable broker."""

import ssl
from typing import Any

import pytest
from aiokafka.conn import AIOKafkaConnection
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed
from pydantic import SecretStr

from slotflow.kafka import oauthbearer
from slotflow.kafka.access import _authentication_failed, authentication_cause
from slotflow.kafka.reading import TopicReader
from slotflow.kafka.security import KafkaSecurity
from slotflow.settings import KafkaSettings


class _Tokens:
    async def token(self) -> str:
        return "header.claims."


async def test_a_refused_token_is_acknowledged_so_the_broker_sends_its_error() -> None:
    authenticator = oauthbearer.RejectionAwareOAuthAuthenticator(sasl_oauth_token_provider=_Tokens())
    first = await authenticator.step(None)
    assert first == (b"n,,\x01auth=Bearer header.claims.\x01\x01", True)
    # The broker's error challenge: acknowledge with a lone 0x01, once.
    assert await authenticator.step(b'{"status":"invalid_token"}') == (b"\x01", True)


async def test_an_accepted_token_ends_the_exchange() -> None:
    authenticator = oauthbearer.RejectionAwareOAuthAuthenticator(sasl_oauth_token_provider=_Tokens())
    await authenticator.step(None)
    assert await authenticator.step(b"") is None


def test_building_oauthbearer_options_installs_the_authenticator() -> None:
    security = KafkaSecurity(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER", sasl_oauth_token=SecretStr("t")
    )
    security.client_options()
    connection: Any = object.__new__(AIOKafkaConnection)
    connection._sasl_oauth_token_provider = _Tokens()
    assert isinstance(connection.authenticator_oauth(), oauthbearer.RejectionAwareOAuthAuthenticator)


def _chained(cause: BaseException) -> KafkaConnectionError:
    try:
        try:
            raise cause
        except BaseException as err:
            raise KafkaConnectionError("Connection at 127.0.0.1:9093 closed") from err
    except KafkaConnectionError as outer:
        return outer


def test_a_tls_alert_behind_a_closed_connection_is_the_cause() -> None:
    alert = ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required")
    assert authentication_cause(_chained(alert)) is alert
    failed = SaslAuthenticationFailed("invalid_token")
    assert authentication_cause(_chained(failed)) is failed
    assert authentication_cause(_chained(ConnectionResetError())) is None
    assert authentication_cause(KafkaConnectionError("refused")) is None


@pytest.mark.parametrize(
    ("reason", "hinted"),
    [
        ("SSLV3_ALERT_BAD_CERTIFICATE", True),
        ("TLSV13_ALERT_CERTIFICATE_REQUIRED", True),
        ("TLSV1_ALERT_UNKNOWN_CA", True),
        ("CERTIFICATE_VERIFY_FAILED", False),  # our refusal of the broker's certificate
    ],
)
def test_a_refused_client_certificate_says_what_the_broker_needs(reason: str, hinted: bool) -> None:
    err = ssl.SSLError(1, f"[SSL: {reason}] ({reason.lower()})")
    err.reason = reason
    message = str(_authentication_failed("127.0.0.1:9093", KafkaSecurity(security_protocol="SSL"), "x", err))
    assert "(SSL) refused the TLS handshake" in message
    assert ("requires a client certificate signed by a CA it trusts" in message) is hinted


async def test_a_topic_reader_connects_with_the_security_settings() -> None:
    security = KafkaSecurity(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="u",
        sasl_password=SecretStr("p"),
    )
    reader = TopicReader(KafkaSettings(bootstrap="127.0.0.1:9092", security=security), "t")
    client: Any = reader._consumer._client
    await reader.stop()  # never started: closes nothing but the unstarted consumer
    assert (client._security_protocol, client._sasl_mechanism) == ("SASL_PLAINTEXT", "PLAIN")
