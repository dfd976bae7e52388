"""OAUTHBEARER as Kafka's own client speaks it: a refused token ends in an error, not a hang.

A broker that refuses an OAUTHBEARER token does not answer with an error code at once: following
RFC 7628 (section 3.2.3) it answers the client's token with an error challenge, a JSON document
such as `{"status":"invalid_token"}`, and waits for the client to acknowledge it with a single
0x01 byte; only then does it end the exchange with SaslAuthenticationFailed and its reason
(Kafka's OAuthBearerSaslServer; its Java client does exactly this in OAuthBearerSaslClient).
aiokafka's `OAuthAuthenticator` (0.14) stops after sending the token whatever the broker said, so it
takes the refusal for a success; its next request then breaks the broker's SASL state, and the
client retries a bootstrap that can never succeed: an expired or forged token looked like an
unreachable broker and a producer's start hung. `install` makes aiokafka's connections use
`RejectionAwareOAuthAuthenticator`, which acknowledges the challenge so the refusal arrives as
`SaslAuthenticationFailed`; a successful exchange (an empty answer) is unchanged.
"""

from typing import Any

from aiokafka.conn import AIOKafkaConnection, OAuthAuthenticator

#: The acknowledgement RFC 7628 asks of a client that received an error challenge (a lone kvsep).
ERROR_ACKNOWLEDGEMENT = b"\x01"


class RejectionAwareOAuthAuthenticator(OAuthAuthenticator):  # type: ignore[misc]  # aiokafka is untyped
    """aiokafka's OAUTHBEARER client step, plus the failure path of RFC 7628 (see the module)."""

    def __init__(self, *, sasl_oauth_token_provider: Any) -> None:
        super().__init__(sasl_oauth_token_provider=sasl_oauth_token_provider)
        self._acknowledged = False

    async def step(self, payload: bytes | None) -> tuple[bytes, bool] | None:
        if self._token_sent and payload and not self._acknowledged:
            # The broker's answer to the token is an error challenge: acknowledge it, and the
            # broker's next answer carries the error code aiokafka raises.
            self._acknowledged = True
            return ERROR_ACKNOWLEDGEMENT, True
        result: tuple[bytes, bool] | None = await super().step(payload)
        return result


def _authenticator_oauth(connection: Any) -> RejectionAwareOAuthAuthenticator:
    return RejectionAwareOAuthAuthenticator(sasl_oauth_token_provider=connection._sasl_oauth_token_provider)


def install() -> None:
    """Make every aiokafka connection use `RejectionAwareOAuthAuthenticator` (idempotent)."""
    # A patch of the one factory method aiokafka's connection calls for OAUTHBEARER: clients
    # build their connections internally, so there is no argument to pass an authenticator by.
    AIOKafkaConnection.authenticator_oauth = _authenticator_oauth
