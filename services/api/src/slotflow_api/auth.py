"""Who is calling the API, and whether they may: bearer tokens, scopes, and the scope of each route.

A caller presents `Authorization: Bearer <token>`. The token is one of:

- an API token (`sft_<token id>_<secret>`), created with `slotflow token create` (or
  `POST /v1/tokens`); only its SHA-256 is stored (`api_tokens` in the api's schema) and the digest is
  compared in constant time, so a copy of the table cannot call the API;
- the bootstrap token (`SLOTFLOW_API_BOOTSTRAP_TOKEN`), an admin token that lives only in the api's
  environment, to create the first real tokens with;
- with `SLOTFLOW_API_OIDC_JWKS_URL` set, a JWT signed by a key of that JWKS, for the configured
  issuer and audience; a claim (`scope` by default) is mapped to a slotflow scope.

Scopes nest: `admin` implies `operate`, which implies `read`. Every route is listed in
`ROUTE_SCOPES` with the scope it needs (or None: public); a route missing from the table needs
`admin` (closed by default), and a unit test keeps the table and the app's routes equal. A route
that publishes a command takes its scope from the command (`slotflow.contracts.scopes`), the table
every service checks signed commands against: one rule for both doors.

What a caller is called (`Principal.name`) travels in the envelope of every command it publishes.
"""

import asyncio
import contextvars
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from slotflow.contracts import (
    Backfill,
    CloseDownstream,
    ConfigureDownstream,
    CreateSchedule,
    DeleteSchedule,
    DiscardDeadLetters,
    MarkSlots,
    OpenDownstream,
    PauseSchedule,
    RedriveDeadLetters,
    RerunSlots,
    ResumeSchedule,
    RetryActivity,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
    TriggerNow,
    UpdateSchedule,
)
from slotflow.contracts import CancelWorkflow as CancelWorkflowCommand
from slotflow.contracts.scopes import COMMAND_SCOPES
from slotflow.contracts.scopes import SCOPES as SCOPES  # re-exported: the scopes are the library's
from slotflow.contracts.scopes import Scope as Scope
from slotflow.contracts.scopes import grants as grants
from slotflow.errors import SlotflowError, TransientError
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow_api.config import ApiSettings
from slotflow_api.sql.auth import MARK_TOKEN_USED, TOKEN_ROW_BY_ID

log = logging.getLogger(__name__)

_RANK: dict[str, int] = {scope: rank for rank, scope in enumerate(SCOPES)}

#: Every API token starts with this, so a leaked one is recognisable (secret scanners, logs).
TOKEN_PREFIX = "sft_"  # noqa: S105 - a prefix, not a secret
_TOKEN_ID_BYTES = 6
_SECRET_BYTES = 32
_TOKEN_SHAPE = re.compile(r"^sft_([0-9a-f]{12})_[A-Za-z0-9_-]{20,200}$")
#: A token's name: what commands it publishes are recorded as (`token:<name>`).
TOKEN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$"  # noqa: S105 - a pattern


def new_token() -> tuple[str, str]:
    """A fresh token: its id (public: listed, used to revoke) and its whole secret."""
    token_id = secrets.token_hex(_TOKEN_ID_BYTES)
    return token_id, f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(_SECRET_BYTES)}"


def digest(secret: str) -> bytes:
    """What is stored of a token: the SHA-256 of the whole secret (high entropy: no salt needed)."""
    return hashlib.sha256(secret.encode("utf-8", errors="surrogatepass")).digest()


def token_id_of(secret: str) -> str | None:
    """The id part of an API token, or None when ``secret`` does not have an API token's shape."""
    match = _TOKEN_SHAPE.match(secret)
    return match.group(1) if match else None


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: its name (as recorded on its commands) and the scope it holds."""

    name: str
    scope: Scope


#: Whoever calls while authentication is off (SLOTFLOW_API_AUTH=off): may do anything.
ANONYMOUS = Principal("anonymous", "admin")
BOOTSTRAP = Principal("bootstrap", "admin")

#: The principal of the request being served, set by `authorize` for the command routes.
CURRENT_PRINCIPAL: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "principal", default=None
)


def current_principal() -> Principal | None:
    """Who issued the request being served (None outside a request that passed `authorize`)."""
    return CURRENT_PRINCIPAL.get()


class Unauthenticated(SlotflowError):
    """No usable bearer token: answered 401 with `WWW-Authenticate: Bearer`."""

    def __init__(self, detail: str, *, error: str | None = None) -> None:
        super().__init__(detail)
        #: RFC 6750's error code (`invalid_token`) when a token was sent but is not good.
        self.error = error


class Forbidden(SlotflowError):
    """The token is good but lacks the scope the route needs: answered 403."""


class OidcUnavailable(TransientError):
    """The identity provider's JWKS could not be fetched: answered 503, retry later."""


# -- which route needs which scope -------------------------------------------------------------

#: The command each command route publishes: its scope is the command's (COMMAND_SCOPES).
COMMAND_ROUTES: Mapping[tuple[str, str], type[Any]] = {
    ("POST", "/v1/schedules"): CreateSchedule,
    ("PUT", "/v1/schedules/{schedule_id}"): UpdateSchedule,
    ("PATCH", "/v1/schedules/{schedule_id}"): UpdateSchedule,
    ("DELETE", "/v1/schedules/{schedule_id}"): DeleteSchedule,
    ("POST", "/v1/schedules/pause"): PauseSchedule,
    ("POST", "/v1/schedules/resume"): ResumeSchedule,
    ("POST", "/v1/schedules/{schedule_id}/pause"): PauseSchedule,
    ("POST", "/v1/schedules/{schedule_id}/resume"): ResumeSchedule,
    ("POST", "/v1/schedules/{schedule_id}/trigger"): TriggerNow,
    ("POST", "/v1/schedules/{schedule_id}/backfill"): Backfill,
    ("POST", "/v1/schedules/{schedule_id}/rerun"): RerunSlots,
    ("POST", "/v1/schedules/{schedule_id}/mark"): MarkSlots,
    ("POST", "/v1/workflows"): StartWorkflow,
    ("POST", "/v1/workflows/cancel"): CancelWorkflowCommand,
    ("POST", "/v1/workflows/terminate"): TerminateWorkflow,
    ("POST", "/v1/workflows/{workflow_id}/signal"): SignalWorkflow,
    ("POST", "/v1/workflows/{workflow_id}/cancel"): CancelWorkflowCommand,
    ("POST", "/v1/workflows/{workflow_id}/terminate"): TerminateWorkflow,
    ("POST", "/v1/workflows/{workflow_id}/activities/{sequence}/retry"): RetryActivity,
    ("POST", "/v1/dlq/redrive"): RedriveDeadLetters,
    ("POST", "/v1/dlq/discard"): DiscardDeadLetters,
    ("POST", "/v1/downstreams/{name}/open"): OpenDownstream,
    ("POST", "/v1/downstreams/{name}/close"): CloseDownstream,
    ("PUT", "/v1/downstreams/{name}/settings"): ConfigureDownstream,
}

#: The routes that publish no command: None is public (no token needed): liveness, readiness and
#: metrics only. Reading needs `read`; tokens and signing keys need `admin`.
_OTHER_ROUTES: Mapping[tuple[str, str], Scope | None] = {
    ("GET", "/healthz"): None,
    ("GET", "/readyz"): None,
    ("GET", "/metrics"): None,
    ("GET", "/v1/schedules"): "read",
    ("GET", "/v1/calendar"): "read",
    ("GET", "/v1/schedules/{schedule_id}"): "read",
    ("GET", "/v1/schedules/{schedule_id}/runs"): "read",
    ("GET", "/v1/schedules/{schedule_id}/backfill"): "read",
    ("GET", "/v1/runs"): "read",
    ("GET", "/v1/runs/{run_id}"): "read",
    ("GET", "/v1/workflows"): "read",
    ("GET", "/v1/workflows/{workflow_id}"): "read",
    ("GET", "/v1/workflows/{workflow_id}/history"): "read",
    # A query reads: it records nothing and runs only the workflow's read-only handler.
    ("POST", "/v1/workflows/{workflow_id}/query"): "read",
    ("GET", "/v1/dlq"): "read",
    ("GET", "/v1/dlq/{dead_letter_id}"): "read",
    ("GET", "/v1/downstreams"): "read",
    ("GET", "/v1/downstreams/{name}"): "read",
    ("GET", "/v1/audit"): "read",
    ("GET", "/v1/commands"): "read",
    ("GET", "/v1/commands/{command_id}"): "read",
    ("GET", "/v1/handlers"): "read",
    ("GET", "/v1/stats/schedules"): "read",
    ("GET", "/v1/stats/workflows"): "read",
    ("GET", "/v1/stats/handlers"): "read",
    ("GET", "/v1/stats/topics"): "read",
    ("GET", "/v1/tokens"): "admin",
    ("POST", "/v1/tokens"): "admin",
    ("DELETE", "/v1/tokens/{token}"): "admin",
    ("GET", "/v1/keys"): "admin",
    ("POST", "/v1/keys"): "admin",
    ("DELETE", "/v1/keys/{key}"): "admin",
}

#: The scope each route needs, by method and path template: a command route its command's scope
#: (`operate` to operate what exists, `admin` to define schedules and a downstream's settings).
ROUTE_SCOPES: Mapping[tuple[str, str], Scope | None] = {
    **_OTHER_ROUTES,
    **{route: COMMAND_SCOPES[command] for route, command in COMMAND_ROUTES.items()},
}


def required_scope(method: str, path: str | None) -> Scope | None:
    """The scope ``method`` on the route template ``path`` needs; `admin` for one not listed."""
    verb = "GET" if method == "HEAD" else method
    if path is None:
        return "admin"
    return ROUTE_SCOPES.get((verb, path), "admin")


# -- tokens in the api's schema ------------------------------------------------------------------


class Authenticator:
    """Turns an `Authorization` header into a `Principal`, or refuses it."""

    def __init__(self, settings: ApiSettings, pool: Pool) -> None:
        self._settings = settings
        self._pool = pool
        self._schema = settings.db_schema
        bootstrap = settings.bootstrap_token
        self._bootstrap = digest(bootstrap.get_secret_value()) if bootstrap is not None else None
        self._oidc = OidcVerifier(settings) if settings.oidc_jwks_url else None

    @property
    def enabled(self) -> bool:
        return self._settings.auth == "on"

    async def authenticate(self, authorization: str | None) -> Principal:
        """The caller named by ``authorization`` (the header's value).

        Raises:
            Unauthenticated: no bearer token, or one that is unknown, revoked or invalid.
            OidcUnavailable: a JWT could not be checked because the JWKS did not answer.
        """
        if not self.enabled:
            return ANONYMOUS
        if not authorization:
            raise Unauthenticated(
                "authentication required: send Authorization: Bearer <token> "
                "(create one with `slotflow token create`; docs/security.md)"
            )
        kind, _, token = authorization.partition(" ")
        token = token.strip()
        if kind.lower() != "bearer" or not token:
            raise Unauthenticated(
                "the Authorization header must be `Bearer <token>`", error="invalid_request"
            )
        presented = digest(token)
        if self._bootstrap is not None and hmac.compare_digest(presented, self._bootstrap):
            return BOOTSTRAP
        token_id = token_id_of(token)
        if token_id is not None:
            return await self._api_token(token_id, presented)
        if self._oidc is not None and token.count(".") == 2:
            return await self._oidc.verify(token)
        raise Unauthenticated("the bearer token is not one this API knows", error="invalid_token")

    async def _api_token(self, token_id: str, presented: bytes) -> Principal:
        row = await self._pool.fetchrow(sql(TOKEN_ROW_BY_ID, self._schema), token_id)
        if row is None or not hmac.compare_digest(bytes(row["secret_sha256"]), presented):
            raise Unauthenticated("the bearer token is not one this API knows", error="invalid_token")
        if row["revoked_at"] is not None:
            raise Unauthenticated(f"the token {row['name']!r} was revoked", error="invalid_token")
        await self._pool.execute(sql(MARK_TOKEN_USED, self._schema), token_id)
        return Principal(f"token:{row['name']}", row["scope"])


# -- OIDC / JWT ------------------------------------------------------------------------------------


class OidcVerifier:
    """Checks a JWT against the keys of a JWKS (PyJWT's PyJWKClient caches them) and maps a claim
    to a slotflow scope."""

    def __init__(self, settings: ApiSettings) -> None:
        if not settings.oidc_jwks_url:
            raise ValueError("OidcVerifier needs SLOTFLOW_API_OIDC_JWKS_URL")
        self._settings = settings
        self._jwks = jwt.PyJWKClient(
            settings.oidc_jwks_url,
            cache_keys=True,
            lifespan=int(settings.oidc_jwks_cache_seconds),
            timeout=int(max(settings.oidc_jwks_timeout_seconds, 1)),
        )

    async def verify(self, token: str) -> Principal:
        """The principal the JWT names, with the highest slotflow scope its claim maps to.

        Raises:
            Unauthenticated: bad signature, expired, wrong issuer or audience, unknown key.
            Forbidden: a valid token whose claim maps to no slotflow scope.
            OidcUnavailable: the JWKS could not be fetched.
        """
        s = self._settings
        try:
            # PyJWKClient fetches with urllib (blocking): off the event loop.
            key = await asyncio.to_thread(self._jwks.get_signing_key_from_jwt, token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=s.oidc_algorithms,
                audience=s.oidc_audience,
                issuer=s.oidc_issuer,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWKClientConnectionError as err:
            raise OidcUnavailable(f"the identity provider's JWKS did not answer: {err}") from err
        except (jwt.PyJWKClientError, jwt.InvalidTokenError) as err:
            raise Unauthenticated(f"the JWT was refused: {err}", error="invalid_token") from err
        subject = claims.get(s.oidc_principal_claim)
        if not isinstance(subject, str) or not subject:
            raise Unauthenticated(
                f"the JWT has no {s.oidc_principal_claim!r} claim to name its caller", error="invalid_token"
            )
        scope = self.scope_of(claims.get(s.oidc_scope_claim))
        if scope is None:
            raise Forbidden(
                f"the JWT of {subject!r} grants no slotflow scope: its {s.oidc_scope_claim!r} claim "
                f"holds none of {sorted(s.oidc_scope_map)} (SLOTFLOW_API_OIDC_SCOPE_MAP)"
            )
        return Principal(f"oidc:{subject}"[:300], scope)

    def scope_of(self, claim: object) -> Scope | None:
        """The highest slotflow scope that ``claim`` (a space-separated string or a list) maps to."""
        values = claim.split() if isinstance(claim, str) else claim if isinstance(claim, list) else []
        mapped = [
            self._settings.oidc_scope_map[v]
            for v in values
            if isinstance(v, str) and v in self._settings.oidc_scope_map
        ]
        best: Scope | None = None
        for scope in mapped:
            if best is None or _RANK[scope] > _RANK[best]:
                best = scope
        return best
