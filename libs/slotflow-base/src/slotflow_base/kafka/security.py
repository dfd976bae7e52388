"""How every Kafka client of slotflow authenticates: TLS and SASL settings, read from the environment.

One model, `KafkaSecurity`, held by `slotflow_base.settings.KafkaConnection.security` (and so by
the library's `KafkaSettings`), so every producer, consumer, reader and admin call of every
service, of the CLI and of the stats worker connects the same way. The library re-exports it as
`slotflow.kafka.security`.

Environment (prefix `SLOTFLOW_KAFKA_`):

- `SECURITY_PROTOCOL`: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL.
- `SASL_MECHANISM`: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (required with SASL_*).
- `SASL_USERNAME`, `SASL_PASSWORD`: for PLAIN and SCRAM.
- `SASL_OAUTH_TOKEN`: a static bearer token (OAUTHBEARER), or
  `SASL_OAUTH_TOKEN_PROVIDER`: `package.module:function`, a callable taking no argument that returns
  the token (a `str`, or an awaitable of one); it is called at every (re)authentication, so it can
  refresh the token.
- `SSL_CAFILE`: PEM file of the CA(s) that signed the broker's certificate (the system's CAs without it).
- `SSL_CERTFILE`, `SSL_KEYFILE`, `SSL_KEY_PASSWORD`: a client certificate (mutual TLS).
- `SSL_CHECK_HOSTNAME`: verify the broker's host name against its certificate (default true).

This module imports no aiokafka at import time: `slotflow.settings` loads it, and the CLI must
start without loading the Kafka client.
"""

import importlib
import inspect
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from slotflow_base.errors import ConfigurationError
from slotflow_base.logs import register_secret

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]

#: Mechanisms that authenticate with a user name and a password.
PASSWORD_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"})

TokenFunction = Callable[[], str | Awaitable[str]]


class KafkaSecurity(BaseSettings):
    """TLS and SASL settings shared by every Kafka client (see the module docstring)."""

    # hide_input_in_errors: a refusal (below) would otherwise quote the settings it refused,
    # secrets included, cut to their first and last 25 characters: a piece of a password that
    # no mask of the whole value catches.
    model_config = SettingsConfigDict(
        env_prefix="SLOTFLOW_KAFKA_", extra="ignore", frozen=True, hide_input_in_errors=True
    )

    #: How clients reach the brokers: plain, TLS, SASL, or SASL over TLS.
    security_protocol: SecurityProtocol = "PLAINTEXT"
    #: How a SASL client proves who it is (required with the SASL protocols).
    sasl_mechanism: SaslMechanism | None = None
    #: The principal's name, for PLAIN and SCRAM.
    sasl_username: str | None = None
    #: The principal's password, for PLAIN and SCRAM.
    sasl_password: SecretStr | None = None
    #: A static bearer token for OAUTHBEARER (or set the token provider instead).
    sasl_oauth_token: SecretStr | None = None
    #: `package.module:function` returning the OAUTHBEARER token (a str or an awaitable of one),
    #: called at every (re)authentication so it can refresh the token.
    sasl_oauth_token_provider: str | None = None
    #: PEM file of the CAs that signed the brokers' certificates; unset: the system's CAs.
    ssl_cafile: Path | None = None
    #: The client's certificate (PEM), for mutual TLS.
    ssl_certfile: Path | None = None
    #: The client certificate's private key (PEM), for mutual TLS.
    ssl_keyfile: Path | None = None
    #: The password of an encrypted private key.
    ssl_key_password: SecretStr | None = None
    #: Verify each broker's host name against its certificate.
    ssl_check_hostname: bool = True

    def model_post_init(self, context: Any, /) -> None:
        # Masked in every log line from now on (slotflow_base.logs), wherever a library prints them.
        for secret in (self.sasl_password, self.sasl_oauth_token, self.ssl_key_password):
            register_secret(secret)

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def principal(self) -> str:
        """Who this client is to the broker, for messages (never the secret)."""
        if self.uses_sasl and self.sasl_mechanism in PASSWORD_MECHANISMS:
            return f"User:{self.sasl_username} ({self.sasl_mechanism})"
        if self.uses_sasl:
            return f"the {self.sasl_mechanism} token's principal"
        if self.ssl_certfile is not None:
            return f"the subject of {self.ssl_certfile}"
        return "User:ANONYMOUS"

    @model_validator(mode="after")
    def _consistent(self) -> "KafkaSecurity":
        prefix = "SLOTFLOW_KAFKA_"
        if self.uses_sasl:
            if self.sasl_mechanism is None:
                raise ValueError(
                    f"{prefix}SECURITY_PROTOCOL={self.security_protocol} needs {prefix}SASL_MECHANISM"
                )
            if self.sasl_mechanism in PASSWORD_MECHANISMS and (
                not self.sasl_username or self.sasl_password is None
            ):
                raise ValueError(
                    f"{prefix}SASL_MECHANISM={self.sasl_mechanism} needs {prefix}SASL_USERNAME "
                    f"and {prefix}SASL_PASSWORD"
                )
            if self.sasl_mechanism == "OAUTHBEARER" and (
                (self.sasl_oauth_token is None) == (self.sasl_oauth_token_provider is None)
            ):
                raise ValueError(
                    f"{prefix}SASL_MECHANISM=OAUTHBEARER needs exactly one of {prefix}SASL_OAUTH_TOKEN "
                    f"and {prefix}SASL_OAUTH_TOKEN_PROVIDER"
                )
        elif self.sasl_mechanism is not None:
            raise ValueError(
                f"{prefix}SASL_MECHANISM is set but {prefix}SECURITY_PROTOCOL={self.security_protocol} "
                "does not use SASL (SASL_PLAINTEXT or SASL_SSL)"
            )
        tls_files = [self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile]
        if not self.uses_ssl and any(f is not None for f in tls_files):
            raise ValueError(
                f"{prefix}SSL_* files are set but {prefix}SECURITY_PROTOCOL={self.security_protocol} "
                "does not use TLS (SSL or SASL_SSL)"
            )
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ValueError(f"{prefix}SSL_KEYFILE needs {prefix}SSL_CERTFILE")
        return self

    def env(self) -> dict[str, str]:
        """These settings as the SLOTFLOW_KAFKA_* variables that recreate them (for a child process;
        secrets included, so never log the result)."""
        values: dict[str, str] = {}
        for name, value in self.model_dump().items():
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            values[f"SLOTFLOW_KAFKA_{name.upper()}"] = (
                str(value).lower() if isinstance(value, bool) else str(value)
            )
        return values

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context: the CA file (or the system's CAs), the client certificate if any.

        Raises:
            ConfigurationError: a file is missing or is not what its setting says.
        """
        try:
            context = ssl.create_default_context(
                ssl.Purpose.SERVER_AUTH, cafile=str(self.ssl_cafile) if self.ssl_cafile else None
            )
            if self.ssl_certfile is not None:
                context.load_cert_chain(
                    str(self.ssl_certfile),
                    str(self.ssl_keyfile) if self.ssl_keyfile else None,
                    self.ssl_key_password.get_secret_value() if self.ssl_key_password else None,
                )
        except (OSError, ssl.SSLError) as err:
            # The file names are in the message; their contents never are.
            raise ConfigurationError(
                f"cannot build the Kafka TLS context (SLOTFLOW_KAFKA_SSL_CAFILE={self.ssl_cafile}, "
                f"SSL_CERTFILE={self.ssl_certfile}, SSL_KEYFILE={self.ssl_keyfile}): {err}"
            ) from err
        context.check_hostname = self.ssl_check_hostname
        return context

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for any aiokafka client (producer, consumer, admin, bare client).

        Raises:
            ConfigurationError: a TLS file cannot be read, or the token provider cannot be loaded.
        """
        options: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.uses_ssl:
            options["ssl_context"] = self.ssl_context()
        if self.uses_sasl and self.sasl_mechanism is not None:
            options["sasl_mechanism"] = self.sasl_mechanism
            if self.sasl_mechanism in PASSWORD_MECHANISMS:
                options["sasl_plain_username"] = self.sasl_username
                options["sasl_plain_password"] = (
                    self.sasl_password.get_secret_value() if self.sasl_password else None
                )
            else:
                options["sasl_oauth_token_provider"] = _token_provider(self._token_function())
        return options

    def _token_function(self) -> TokenFunction:
        if self.sasl_oauth_token is not None:
            token = self.sasl_oauth_token.get_secret_value()
            return lambda: token
        return load_token_function(self.sasl_oauth_token_provider or "")


def load_token_function(path: str) -> TokenFunction:
    """The callable `package.module:function` names (SLOTFLOW_KAFKA_SASL_OAUTH_TOKEN_PROVIDER).

    Raises:
        ConfigurationError: the path is malformed, the module does not import, or the name is not
            a callable.
    """
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(
            f"SLOTFLOW_KAFKA_SASL_OAUTH_TOKEN_PROVIDER={path!r}: expected package.module:function"
        )
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigurationError(
            f"SLOTFLOW_KAFKA_SASL_OAUTH_TOKEN_PROVIDER: cannot import {module_name}: {err}"
        ) from err
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigurationError(
                f"SLOTFLOW_KAFKA_SASL_OAUTH_TOKEN_PROVIDER: {module_name} has no {attribute}"
            )
        target = getattr(target, part)
    if not callable(target):
        raise ConfigurationError(f"SLOTFLOW_KAFKA_SASL_OAUTH_TOKEN_PROVIDER: {path} is not callable")
    function: TokenFunction = target
    return function


def _token_provider(function: TokenFunction) -> Any:
    """An aiokafka AbstractTokenProvider calling ``function`` at every authentication."""
    from aiokafka.abc import AbstractTokenProvider

    from slotflow_base.kafka import oauthbearer

    # A refused token must fail the login, not leave the client retrying forever (see the module).
    oauthbearer.install()

    class _Provider(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka is untyped
        async def token(self) -> str:
            value: object = function()
            if inspect.isawaitable(value):
                value = await value
            # A user's callable: its annotation promises a str, but nothing checks it at run time.
            if not isinstance(value, str) or not value:
                raise ConfigurationError("the OAUTHBEARER token provider returned no token (a non-empty str)")
            return value

    return _Provider()
