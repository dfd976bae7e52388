"""HTTP error mapping: every failure leaves as {"detail": "..."} with a status a client can act on."""

import logging

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from slotflow.contracts import acceptance
from slotflow.errors import MessageTooLarge, PermanentError, PoisonMessage, SlotflowError, TransientError
from slotflow.logs import redact
from slotflow.pg.pool import CONNECTION_ERRORS
from slotflow_api.auth import Forbidden, Unauthenticated

log = logging.getLogger(__name__)


class NotFound(SlotflowError):
    """Nothing with that id is in the read model (yet)."""


class BadRequest(PermanentError):
    """The request cannot be served as asked."""


class BadQuery(BadRequest):
    """A list's `query` does not parse or type: a 400 saying where and what (slotflow_api.query)."""


class TokenConflict(SlotflowError):
    """A live token already has that name: revoke it first, or choose another."""


class KeyConflict(SlotflowError):
    """The signing key is registered already, or a live key has that name."""


class WorkflowClosed(SlotflowError):
    """The workflow has ended: a signal, cancel or terminate has nothing left to act on."""


class BackfillsInFlight(SlotflowError):
    """The schedule has as many backfills in flight as `max_backfills_in_flight` allows."""


#: Where a request value came from: dropped from the field's path (a user wrote `definition.spec`,
#: not `body.definition.spec`).
_SOURCES = frozenset({"body", "query", "path", "header"})
#: The tags pydantic adds to a path inside a tagged union (`spec.interval.every`).
_SPEC_KINDS = frozenset({"cron", "interval", "once"})
_DURATION_WORDS = (
    "is not a duration; use ISO 8601 (PT15M, PT1H30M), a number of seconds, or 15m, 1h30m, 250ms"
)
_INSTANT_WORDS = "is not a time; use ISO 8601 with a UTC offset, e.g. 2026-12-02T02:00:00Z"


def _where(loc: object) -> str:
    if not isinstance(loc, list | tuple):
        return str(loc)
    parts = [str(p) for p in loc]
    if parts and parts[0] in _SOURCES:
        parts = parts[1:]
    kept = [p for i, p in enumerate(parts) if not (p in _SPEC_KINDS and i > 0 and parts[i - 1] == "spec")]
    return ".".join(kept)


def _choices(expected: object) -> str:
    # pydantic's "'a', 'b' or 'c'" as "a, b, c"
    return str(expected).replace("'", "").replace(" or ", ", ")


def _in_words(item: dict[str, object]) -> str:
    """One validation error as a sentence about the value, not about the validation library."""
    kind = str(item.get("type", ""))
    found = item.get("ctx")
    context: dict[str, object] = found if isinstance(found, dict) else {}
    msg = str(item.get("msg", "invalid"))
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a field here"
    if kind in ("literal_error", "enum"):
        return f"must be one of {_choices(context.get('expected', ''))}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        word = {"greater_than_equal": "at least", "greater_than": "more than"}.get(kind)
        word = word or {"less_than_equal": "at most", "less_than": "less than"}[kind]
        bound = next(iter(context.values()), "")
        return f"must be {word} {bound}"
    if kind.startswith("time_delta"):
        return _DURATION_WORDS
    if kind == "timezone_aware":
        return "has no UTC offset (time zone); add one, e.g. 2026-12-02T02:00:00Z"
    if kind.startswith(("datetime", "date_")):
        return _INSTANT_WORDS
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return "must be a whole number"
    if kind in ("bool_parsing", "bool_type"):
        return "must be true or false"
    if kind in ("string_too_long", "too_long"):
        return f"is too long (at most {context.get('max_length', '?')})"
    if kind in ("string_too_short", "too_short"):
        return f"is too short (at least {context.get('min_length', '?')})"
    if kind == "string_pattern_mismatch":
        return f"has characters that are not allowed (it must match {context.get('pattern', '')})"
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        return "needs a kind: cron (with expression), interval (with every) or once (with at)"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a JSON object"
    if kind == "json_invalid":
        return f"is not valid JSON ({context.get('error', msg)})"
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    return msg


def describe_validation(errors: list[dict[str, object]] | object) -> str:
    """`where: what` for each failing field, joined: the message a person reads.

    The field is named as the user wrote it and the problem in the user's words (`definition.spec.every:
    is not a duration; use ...`), not in the validation library's.
    """
    if not isinstance(errors, list):
        return str(errors)
    parts = []
    names = [_where(item.get("loc", ())) for item in errors if isinstance(item, dict)]
    for item in errors[:20]:
        if not isinstance(item, dict):
            continue
        if item.get("type") == acceptance.ERROR_TYPE:
            # The acceptance rule's refusal names the field itself (`definition.payload.note:
            # contains a NUL character ...`), as the request wrote it.
            parts.append(str(item.get("msg", "")))
            continue
        parts.append(f"{_where(item.get('loc', ())) or '(body)'}: {_in_words(item)}")
    # A flat create body (spec and handler beside schedule_id) is the commonest first mistake.
    if "definition" in names and ("spec" in names or "handler" in names):
        parts.append(
            'put spec, handler and the policies inside "definition" (docs/api.md has one example per command)'
        )
    return "; ".join(parts) or "invalid request"


def _json(status: int, detail: str) -> JSONResponse:
    # An error's text may embed a DSN or another secret (a dependency's message): masked here, the
    # one door every error body leaves by.
    return JSONResponse(status_code=status, content={"detail": redact(detail)})


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _json(422, describe_validation(list(exc.errors())))

    @app.exception_handler(ValidationError)
    async def _invalid_model(_: Request, exc: ValidationError) -> JSONResponse:
        return _json(422, describe_validation(list(exc.errors(include_url=False))))

    @app.exception_handler(Unauthenticated)
    async def _unauthenticated(_: Request, exc: Unauthenticated) -> JSONResponse:
        # RFC 6750: the challenge names the scheme, and the error when a token was sent.
        challenge = 'Bearer realm="slotflow"'
        if exc.error is not None:
            challenge += f', error="{exc.error}"'
        return JSONResponse(
            status_code=401, content={"detail": str(exc)}, headers={"WWW-Authenticate": challenge}
        )

    @app.exception_handler(Forbidden)
    async def _forbidden(_: Request, exc: Forbidden) -> JSONResponse:
        return JSONResponse(
            status_code=403,
            content={"detail": str(exc)},
            headers={"WWW-Authenticate": 'Bearer realm="slotflow", error="insufficient_scope"'},
        )

    @app.exception_handler(TokenConflict)
    async def _token_conflict(_: Request, exc: TokenConflict) -> JSONResponse:
        return _json(409, str(exc))

    @app.exception_handler(KeyConflict)
    async def _key_conflict(_: Request, exc: KeyConflict) -> JSONResponse:
        return _json(409, str(exc))

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return _json(404, str(exc))

    @app.exception_handler(WorkflowClosed)
    async def _workflow_closed(_: Request, exc: WorkflowClosed) -> JSONResponse:
        return _json(409, str(exc))

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

    @app.exception_handler(BadQuery)
    async def _bad_query(_: Request, exc: BadQuery) -> JSONResponse:
        # The request is well formed; the query in it is not a condition of the filter language.
        return _json(400, str(exc))

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
