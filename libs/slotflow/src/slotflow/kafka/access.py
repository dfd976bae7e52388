"""Say plainly why a Kafka client could not start: wrong credentials, TLS, or a missing ACL.

aiokafka reports a refused SASL handshake while bootstrapping only as "Unable to bootstrap from
[...]" (the cause goes to its log). A service must instead stop at start with a message naming the
principal and the cause, and must not retry a wrong password forever as if the broker were away:
`start_failure` probes one connection with the same settings and returns the error to raise.
"""

import asyncio
import ssl
from typing import Any

from aiokafka.conn import create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    UnsupportedSaslMechanismError,
)

from slotflow.errors import (
    ConfigurationError,
    KafkaAccessDenied,
    KafkaAuthenticationFailed,
    SlotflowError,
    TransientStorageError,
)
from slotflow.kafka.security import KafkaSecurity

#: aiokafka's errors for a refused authorisation; a service cannot do its work without the ACL.
AUTHORIZATION_ERRORS: tuple[type[Exception], ...] = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

_AUTHENTICATION_ERRORS: tuple[type[Exception], ...] = (
    SaslAuthenticationFailed,
    AuthenticationFailedError,
    UnsupportedSaslMechanismError,
    ssl.SSLError,
)

#: How long the diagnostic connection may take.
_PROBE_TIMEOUT_S = 10.0


def access_denied(err: BaseException, security: KafkaSecurity, what: str) -> KafkaAccessDenied | None:
    """The error to raise when ``err`` is an authorisation refusal, else None."""
    if not isinstance(err, AUTHORIZATION_ERRORS):
        return None
    return KafkaAccessDenied(
        f"{what}: Kafka refused {security.principal}: {type(err).__name__}: {err}; "
        "grant the ACL this service needs (docs/security.md, Kafka)"
    )


async def start_failure(
    bootstrap: str, security: KafkaSecurity, err: BaseException, what: str
) -> SlotflowError:
    """The error to raise for a client of ``what`` that failed to start with ``err``.

    An authorisation refusal becomes `KafkaAccessDenied`, a refused login or TLS handshake
    `KafkaAuthenticationFailed` (both permanent), anything else `TransientStorageError`.
    """
    denied = access_denied(err, security, what)
    if denied is not None:
        return denied
    if isinstance(err, _AUTHENTICATION_ERRORS):
        return _authentication_failed(bootstrap, security, what, err)
    if security.security_protocol != "PLAINTEXT":
        cause = await _probe(bootstrap, security)
        if cause is not None:
            return _authentication_failed(bootstrap, security, what, cause)
    return TransientStorageError(f"cannot start {what}: Kafka at {bootstrap}: {err}")


def _authentication_failed(
    bootstrap: str, security: KafkaSecurity, what: str, cause: BaseException
) -> KafkaAuthenticationFailed:
    kind = "TLS handshake" if isinstance(cause, ssl.SSLError) else "authentication"
    hint = ""
    if isinstance(cause, ssl.SSLError) and _refused_client_certificate(cause):
        hint = (
            "; the broker requires a client certificate signed by a CA it trusts "
            "(SLOTFLOW_KAFKA_SSL_CERTFILE and SLOTFLOW_KAFKA_SSL_KEYFILE)"
        )
    return KafkaAuthenticationFailed(
        f"cannot start {what}: Kafka at {bootstrap} ({security.security_protocol}) refused the {kind} "
        f"of {security.principal}: {type(cause).__name__}: {cause}{hint}"
    )


def _refused_client_certificate(err: ssl.SSLError) -> bool:
    """The broker's TLS alert about our certificate (bad, unknown CA, required), as opposed to our
    own refusal of the broker's certificate (CERTIFICATE_VERIFY_FAILED, no alert)."""
    reason = f"{err.reason or ''} {err}".upper()
    return "ALERT" in reason and ("CERTIFICATE" in reason or "UNKNOWN_CA" in reason)


def authentication_cause(err: BaseException) -> BaseException | None:
    """The authentication or TLS error among ``err``'s causes (``err`` itself excluded), if any."""
    seen: set[int] = set()
    cause = err.__cause__ or err.__context__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, _AUTHENTICATION_ERRORS):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


async def _probe(bootstrap: str, security: KafkaSecurity) -> BaseException | None:
    """Connect once to the first bootstrap address; the authentication or TLS error, if that was it."""
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    try:
        options = security.client_options()
    except ConfigurationError as err:
        return err
    conn: Any = None
    try:
        conn = await asyncio.wait_for(
            create_conn(host.strip("[]"), int(port), client_id="slotflow-probe", **options), _PROBE_TIMEOUT_S
        )
    except _AUTHENTICATION_ERRORS as err:
        return err
    except (KafkaError, OSError, TimeoutError, ValueError) as err:
        # Under TLS 1.3 the broker refuses a missing or unknown client certificate only after the
        # handshake, as an alert read on the first request: aiokafka then reports a closed
        # connection whose cause is the ssl.SSLError.
        return authentication_cause(err)  # None: not a credentials problem (the caller reports)
    finally:
        if conn is not None:
            conn.close()
    return None
