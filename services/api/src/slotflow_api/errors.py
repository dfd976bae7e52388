"""HTTP error mapping: every failure leaves as {"detail": "..."} with a status a client can act on."""

import logging

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from slotflow.errors import MessageTooLarge, PermanentError, PoisonMessage, SlotflowError, TransientError
from slotflow.pg.pool import CONNECTION_ERRORS

log = logging.getLogger(__name__)


class NotFound(SlotflowError):
    """Nothing with that id is in the read model (yet)."""


class BadRequest(PermanentError):
    """The request cannot be served as asked."""


class BackfillsInFlight(SlotflowError):
    """The schedule has as many backfills in flight as `max_backfills_in_flight` allows."""


def describe_validation(errors: list[dict[str, object]] | object) -> str:
    """`where: what` for each failing field, joined: the message a person reads."""
    if not isinstance(errors, list):
        return str(errors)
    parts = []
    for item in errors[:20]:
        if not isinstance(item, dict):
            continue
        loc = item.get("loc", ())
        where = ".".join(str(p) for p in loc) if isinstance(loc, list | tuple) else str(loc)
        parts.append(f"{where or '(body)'}: {item.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def _json(status: int, detail: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"detail": detail})


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _json(422, describe_validation(list(exc.errors())))

    @app.exception_handler(ValidationError)
    async def _invalid_model(_: Request, exc: ValidationError) -> JSONResponse:
        return _json(422, describe_validation(list(exc.errors(include_url=False))))

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return _json(404, str(exc))

    @app.exception_handler(BackfillsInFlight)
    async def _in_flight(_: Request, exc: BackfillsInFlight) -> JSONResponse:
        return _json(409, str(exc))

    @app.exception_handler(MessageTooLarge)
    async def _too_large(_: Request, exc: MessageTooLarge) -> JSONResponse:
        # Under the body limit, but the command as a Kafka record is over the topic's limit.
        return _json(413, f"the command is too large to publish: {exc}")

    @app.exception_handler(PoisonMessage)
    async def _unprocessable(_: Request, exc: PoisonMessage) -> JSONResponse:
        # What its consumers would park (nesting too deep, say): refused before it is published.
        return _json(422, str(exc))

    @app.exception_handler(PermanentError)
    async def _permanent(_: Request, exc: PermanentError) -> JSONResponse:
        return _json(422, str(exc))

    @app.exception_handler(TransientError)
    async def _transient(_: Request, exc: TransientError) -> JSONResponse:
        log.warning("dependency unavailable: %s", exc)
        return _json(503, f"a dependency is unavailable, retry later: {exc}")

    @app.exception_handler(asyncpg.DataError)
    async def _bad_data(_: Request, exc: asyncpg.DataError) -> JSONResponse:
        # Text PostgreSQL cannot store (a NUL byte) or a value out of its range. The edge refuses
        # NULs first (RefuseNul, submit); this is what is left, in words rather than SQLSTATEs.
        if exc.sqlstate in ("22021", "22P05") or "0x00" in str(exc) or "\\u0000" in str(exc):
            return _json(422, "a value contains a NUL character (U+0000), which cannot be stored; remove it")
        if exc.sqlstate == "22003":
            return _json(422, "a number is out of the range that can be stored")
        return _json(422, f"invalid value: {exc}")

    @app.exception_handler(UnicodeError)
    async def _bad_text(_: Request, exc: UnicodeError) -> JSONResponse:
        return _json(422, f"invalid text: {exc}")

    for error_type in CONNECTION_ERRORS:
        if not issubclass(error_type, Exception):
            continue

        @app.exception_handler(error_type)
        async def _unavailable(_: Request, exc: Exception) -> JSONResponse:
            log.warning("PostgreSQL unavailable: %s", exc)
            return _json(503, "PostgreSQL is unavailable, retry later")
