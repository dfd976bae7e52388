"""What every handler gets: the parsed arguments, where to print, and lazily built clients."""

import argparse
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

import httpx
from pydantic import ValidationError

from slotflow.cli.api import ApiClient
from slotflow.cli.errors import UsageError
from slotflow.cli.output import Column, dump_json, render_fields, render_table
from slotflow.cli.values import explain
from slotflow.logs import register_secret

if TYPE_CHECKING:
    from slotflow.principals import Signer
    from slotflow.settings import KafkaSettings


@dataclass
class Context:
    """One CLI invocation."""

    args: argparse.Namespace
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    #: Tests hand in an in-memory transport; normally None (real HTTP).
    api_transport: httpx.AsyncBaseTransport | None = None

    @property
    def as_json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    @property
    def timeout(self) -> float:
        value = float(getattr(self.args, "timeout", 10.0))
        if value <= 0:
            raise UsageError(f"--timeout must be positive, got {value:g}")
        return value

    def api(self) -> ApiClient:
        token = getattr(self.args, "token", None)
        register_secret(token)  # masked should any message or log line carry it
        return ApiClient(
            str(self.args.api_url), timeout=self.timeout, transport=self.api_transport, token=token or None
        )

    def kafka(self) -> "KafkaSettings":
        # Imported here: the settings pull in the contract models, which queries never need.
        from slotflow.settings import KafkaSettings

        try:
            return KafkaSettings()
        except ValidationError as err:
            raise UsageError(f"bad SLOTFLOW_KAFKA_* environment: {explain(err)}") from None

    @property
    def via_kafka(self) -> bool:
        """Whether commands go straight to Kafka (`--via kafka`) rather than through the api."""
        return getattr(self.args, "via", "api") == "kafka"

    def signer(self) -> "Signer":
        """The signer for `--via kafka`: `--signing-key`/`--signing-principal`, else
        SLOTFLOW_SIGNING_KEY_FILE/SLOTFLOW_SIGNING_PRINCIPAL.

        Raises:
            UsageError: no key, a key without its principal, or a key file that is not usable.
        """
        from slotflow.errors import ConfigurationError
        from slotflow.principals import SignatureSettings

        overrides: dict[str, Any] = {}
        if getattr(self.args, "signing_key", None):
            overrides["signing_key_file"] = self.args.signing_key
        if getattr(self.args, "signing_principal", None):
            overrides["signing_principal"] = self.args.signing_principal
        try:
            signer = SignatureSettings(**overrides).signer()
        except ValidationError as err:
            raise UsageError(f"bad SLOTFLOW_SIGNING_* environment: {explain(err)}") from None
        except ConfigurationError as err:
            raise UsageError(str(err)) from None
        if signer is None:
            raise UsageError(
                "--via kafka sends commands as a proven principal: give a signing key registered for it "
                "(--signing-key FILE --signing-principal key:NAME, or SLOTFLOW_SIGNING_KEY_FILE and "
                "SLOTFLOW_SIGNING_PRINCIPAL; `slotflow key create` makes one), or leave out --via kafka to "
                "send through the api with your token"
            )
        return signer

    def emit_json(self, value: Any) -> None:
        dump_json(value, self.out)

    def emit_table(self, rows: list[dict[str, Any]], columns: Iterable[Column], *, empty: str) -> None:
        if rows:
            self.out.write(render_table(rows, list(columns)))
        else:
            self.out.write(empty + "\n")

    def emit_fields(self, pairs: Iterable[tuple[str, str]]) -> None:
        self.out.write(render_fields(pairs))

    def note(self, message: str) -> None:
        """A hint for people on stderr, so stdout stays parseable."""
        self.err.write(message + "\n")


Handler = Callable[[Context], int]
