"""Unsigned OAUTHBEARER tokens for the devstack's MECHS listener, whose broker checks them with
Kafka's default unsecured validator (OAuthBearerUnsecuredValidatorCallbackHandler): a JWS whose
header is {"alg":"none"}, with an empty signature, a "sub" claim (the principal) and an "exp" in the
future. A real deployment configures a signed-token validator instead; the client side, what
slotflow sends, is the same."""

import base64
import json
import os
import time

#: The principal `token` names (a service process of the test sets it).
SUBJECT_ENV = "SLOTFLOW_TEST_OAUTH_SUBJECT"


def _part(value: dict[str, object]) -> str:
    raw = json.dumps(value, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unsecured_jws(subject: str, *, lifetime_s: float = 3600.0, issued_at: float | None = None) -> str:
    """An unsigned compact JWS for ``subject`` (expired when ``lifetime_s`` is negative)."""
    now = time.time() if issued_at is None else issued_at
    claims = {"sub": subject, "iat": int(now), "exp": int(now + lifetime_s)}
    return f"{_part({'alg': 'none'})}.{_part(claims)}."


def token() -> str:
    """SLOTFLOW_KAFKA_SASL_OAUTH_TOKEN_PROVIDER=tests.integration.security.oauth_tokens:token: a
    fresh ten-minute token for the subject in SLOTFLOW_TEST_OAUTH_SUBJECT, at every login."""
    return unsecured_jws(os.environ[SUBJECT_ENV], lifetime_s=600.0)
