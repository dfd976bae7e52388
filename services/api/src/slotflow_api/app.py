"""Composition root of the HTTP service: pool, producer, optional in-process projector, routes."""

import asyncio
import contextlib
import importlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi import Depends, FastAPI, Request, Response
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi
from starlette.routing import Match

from slotflow.contracts.topics import WORKFLOW_COMMANDS
from slotflow.errors import SlotflowError
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool, wait_for_pool
from slotflow.principals import Signer
from slotflow.principals.signing import load_private_key
from slotflow.relay import OutboxRelay
from slotflow.service import Supervisor, metrics_listener, sleep_or_stop
from slotflow_api import errors, keys
from slotflow_api.app_state import Services
from slotflow_api.auth import Authenticator, required_scope
from slotflow_api.config import ApiSettings, Settings
from slotflow_api.csrf import CLIENT_HEADER, CsrfGuard
from slotflow_api.guard import authorize
from slotflow_api.limits import BodyLimit, RefuseNul
from slotflow_api.metrics import Metrics
from slotflow_api.paths import EncodedIdPaths
from slotflow_api.projector import Projector, migrate
from slotflow_api.request_tracing import TraceRequests
from slotflow_api.retention import purge_read_model
from slotflow_api.routes import (
    audit,
    commands,
    dlq,
    downstreams,
    handlers,
    health,
    runs,
    schedules,
    stats,
    tokens,
    workflows,
)
from slotflow_api.routes import keys as keys_routes
from slotflow_api.routes.apidocs import mount_api_docs
from slotflow_api.workflow_queries import Queries

log = logging.getLogger(__name__)

API_VERSION = "1.0.0"


class LoopCrashed(SlotflowError):
    """A loop of the api process (projector, purge, relay) crashed: the HTTP server was stopped so
    that no frozen read model is served as if it were current."""


class NotServing(SlotflowError):
    """The HTTP server stopped without being asked to (it could not start: the log says why)."""


class _Server(uvicorn.Server):
    # The entry (slotflow.service.serve) owns SIGTERM and SIGINT, as in every service: uvicorn's own
    # handlers would stop the server without the stop event, and re-raise the signal afterwards.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ApiService:
    """The HTTP api (with the projector in the same process unless turned off): `await run(stop)`
    like every service."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set; a crashed loop stops the server and raises `LoopCrashed`
        (unless `keep_serving_after_crash`: then /readyz answers 503 and reads go on)."""
        crashes: list[str] = []
        api = self.settings.api
        # log_config=None: uvicorn's loggers propagate to the root handler configure_logging set
        # up (one format, and the secret mask), instead of handlers of uvicorn's own.
        app = create_app(self.settings, on_crash=crashes.append)
        config = uvicorn.Config(
            app,
            host=api.host,
            port=api.port,
            log_level="info",
            log_config=None,
        )
        server = _Server(config)

        async def stop_serving() -> None:
            while not stop.is_set() and not crashes:
                await sleep_or_stop(stop, 0.2)
            server.should_exit = True

        watcher = asyncio.create_task(stop_serving(), name="api-stop")
        try:
            # /metrics is served on the HTTP port too; this is the port every service has.
            with metrics_listener(app.state.metrics.registry, port=api.metrics_port, host=api.metrics_host):
                await server.serve()
        finally:
            watcher.cancel()
        if crashes:
            raise LoopCrashed(crashes[0])
        if not server.started:
            raise NotServing(f"the HTTP server on {api.host}:{api.port} did not start")


class ProjectorService:
    """Only the projector (and the read model's purge), without HTTP: `await run(stop)`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def run(self, stop: asyncio.Event) -> None:
        pool: Pool = await wait_for_pool(self.settings.postgres, max_size=self.settings.api.pool_size)
        try:
            loops = Supervisor("api-projector")
            loops.add("projector", Projector(pool, self.settings).run)
            loops.add("purge", lambda stop: purge_read_model(stop, pool, self.settings))
            await loops.run(stop)
        finally:
            await pool.close()


def create_app(settings: Settings | None = None, *, on_crash: Callable[[str], None] | None = None) -> FastAPI:
    """The FastAPI application; its lifespan opens the pool and producer (and the projector).

    When a loop of the process (projector, purge, relay) crashes, /readyz answers 503 with the
    reason from then on, and `on_crash(reason)` is called unless `keep_serving_after_crash` is set:
    the entry point stops the server and exits non-zero, so a frozen read model is not served.
    """
    chosen = settings or Settings()
    metrics = Metrics()
    if chosen.api.auth == "off":
        # Said at start-up, where whoever deploys it reads: an open API can pause every payout.
        log.warning(
            "API AUTHENTICATION IS OFF (SLOTFLOW_API_AUTH=off): anyone who can reach this API may "
            "read, operate and define everything, and commands are recorded as `anonymous`"
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        signer = own_signer(chosen.api)
        pool = await wait_for_pool(chosen.postgres, max_size=chosen.api.pool_size)
        producer = Producer(chosen.kafka, client_id="api")
        stop = asyncio.Event()
        task: asyncio.Task[None] | None = None
        queries: Queries | None = None
        try:
            schema = chosen.api.db_schema
            await migrate(pool, schema)
            async with pool.acquire() as conn, conn.transaction():
                await keys.register_own(conn, schema, chosen.kafka, signer)
            log.info("api: signing commands with key %s (%s)", signer.key_id, keys.API_PRINCIPAL)
            await producer.start()
            relay = OutboxRelay(pool, producer, schema=schema)
            state = Services(
                chosen, pool, producer, metrics, Authenticator(chosen.api, pool), signer=signer, relay=relay
            )
            token = chosen.api.orchestrator_query_token
            state.queries = queries = Queries(
                pool,
                producer,
                schema=chosen.api.orchestrator_schema,
                commands_topic=chosen.kafka.topic(WORKFLOW_COMMANDS),
                token=token.get_secret_value() if token is not None else None,
            )
            loops = Supervisor("api")
            # Publishes the signing keys' records (the api's own first) to the keys topic.
            loops.add("relay", relay.run)
            if chosen.api.embedded_projector:
                state.projector = Projector(pool, chosen, metrics)
                loops.add("projector", state.projector.run)
                # The read model's owner purges it: with the projector, wherever that runs.
                loops.add("purge", lambda stop: purge_read_model(stop, pool, chosen))
            task = asyncio.create_task(loops.run(stop), name="api")
            task.add_done_callback(lambda ended: _loops_ended(ended, loops, state, on_crash))
            app.state.services = state
            yield
        finally:
            stop.set()
            if task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, timeout=15)
            if queries is not None:
                await queries.close()
            await producer.stop()
            await pool.close()

    app = FastAPI(
        title="slotflow",
        version=API_VERSION,
        description=(
            "Read-model queries over every slotflow topic, the slot audit, and commands over HTTP. "
            "Commands are published to Kafka and return their id; `?wait=` or "
            "`GET /v1/commands/{id}?wait=` waits until the command is reflected (read-your-writes)."
        ),
        lifespan=lifespan,
        openapi_url="/v1/openapi.json",
        # Served offline by mount_api_docs, not from FastAPI's CDN.
        docs_url=None,
        redoc_url=None,
    )
    app.state.metrics = metrics
    errors.install(app)
    # Every API route authenticates its caller and checks its scope (slotflow_api.auth.ROUTE_SCOPES;
    # health, readiness and metrics are public). The dashboard's pages and the API docs carry no
    # data: their scripts call these routes with the operator's token.
    for module in (
        health,
        schedules,
        runs,
        workflows,
        dlq,
        downstreams,
        audit,
        commands,
        handlers,
        stats,
        tokens,
        keys_routes,
    ):
        app.include_router(module.router, dependencies=[Depends(authorize)])
    mount_api_docs(app)
    _mount_ui(app)
    # Inside the metrics middleware, so refused bodies are counted as 413s too.
    app.add_middleware(BodyLimit, max_bytes=chosen.api.max_body_bytes)
    app.add_middleware(RefuseNul)
    # A workflow id escaped as one path segment (`a%2Fb`) stays one segment for the router.
    app.add_middleware(EncodedIdPaths)
    _instrument(app, metrics)
    # Outside the counting, so a request's span covers all of it; inside the CSRF guard, so a
    # forged request is refused before anything (this included) sees it.
    app.add_middleware(TraceRequests)
    _document_errors(app)
    # Outermost: a forged cross-site request is refused before anything else sees it.
    app.add_middleware(
        CsrfGuard,
        allowed_hosts=chosen.api.allowed_hosts,
        allowed_origins=[*chosen.api.allowed_origins, *chosen.api.cors_origins],
    )
    if chosen.api.cors_origins:
        # Closed unless asked: without SLOTFLOW_API_CORS_ORIGINS no CORS header is ever sent, so no
        # page of another origin can read an answer (or send a preflighted request).
        app.add_middleware(
            CORSMiddleware,
            allow_origins=chosen.api.cors_origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", CLIENT_HEADER],
            allow_credentials=False,
        )
    return app


def _loops_ended(
    ended: "asyncio.Task[None]", loops: Supervisor, state: Services, on_crash: Callable[[str], None] | None
) -> None:
    # The supervisor ends on a stop (nothing to do) or on a loop's crash: then the read model is no
    # longer updated, and answering from it as if it were would hide that from every caller.
    if ended.cancelled() or ended.exception() is None:
        return
    error = ended.exception()
    state.crashed = f"the {loops.crashed or 'supervisor'} loop crashed: {type(error).__name__}: {error}"
    if state.settings.api.keep_serving_after_crash:
        log.error("api: %s; serving stale reads (SLOTFLOW_API_KEEP_SERVING_AFTER_CRASH)", state.crashed)
        return
    log.error("api: %s; stopping the service", state.crashed)
    if on_crash is not None:
        on_crash(state.crashed)


def own_signer(settings: ApiSettings) -> Signer:
    """The api's signer: the key in `SLOTFLOW_API_SIGNING_KEY_FILE`, or one made now and held in
    memory only (registered at start either way). It acts for others: it names the caller the api
    authenticated as each command's principal.

    Raises:
        KeyFileError: the key file is not a usable Ed25519 key.
    """
    if settings.signing_key_file is not None:
        key = load_private_key(settings.signing_key_file)
    else:
        key = Ed25519PrivateKey.generate()
    return Signer(key, keys.API_PRINCIPAL, acts_for_others=True)


ERROR_SCHEMA = {
    "title": "Error",
    "type": "object",
    "properties": {"detail": {"type": "string", "description": "what is wrong and what to do"}},
    "required": ["detail"],
}


def _document_errors(app: FastAPI) -> None:
    # Every error leaves as {"detail": "..."} (slotflow_api.errors), including validation errors,
    # so the spec says so instead of FastAPI's default list-shaped HTTPValidationError.
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            components = schema.setdefault("components", {})
            components.setdefault("schemas", {})["HTTPValidationError"] = ERROR_SCHEMA
            _document_auth(schema, components)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


_AUTH_ERRORS: dict[str, dict[str, Any]] = {
    "401": {
        "description": "no bearer token, or one that is unknown, revoked or expired",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}},
    },
    "403": {
        "description": "the token lacks the scope this needs",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}},
    },
}


def _document_auth(schema: dict[str, Any], components: dict[str, Any]) -> None:
    # The bearer scheme, and on every operation that needs a token: which scope, and its 401/403.
    components.setdefault("securitySchemes", {})["bearer"] = {
        "type": "http",
        "scheme": "bearer",
        "description": "an API token (`slotflow token create`) or, when configured, an OIDC JWT",
    }
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            needed = required_scope(method.upper(), path)
            if needed is None:
                operation["security"] = []
                continue
            operation["security"] = [{"bearer": []}]
            operation["description"] = (
                f"{operation.get('description', '')}\n\nNeeds a token with the `{needed}` scope."
            ).strip()
            for status, response in _AUTH_ERRORS.items():
                operation.setdefault("responses", {}).setdefault(status, response)


def _mount_ui(app: FastAPI) -> None:
    # The dashboard is its own module; the JSON API stands without it.
    try:
        ui = importlib.import_module("slotflow_api.routes.ui")
    except ImportError as err:
        log.info("dashboard not available: %s", err)
        return
    mount = getattr(ui, "mount_ui", None)
    if callable(mount):
        mount(app)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _route_template(request: Request) -> str:
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match == Match.FULL:
            return str(getattr(route, "path", "other"))
    return "unmatched"


def _instrument(app: FastAPI, metrics: Metrics) -> None:
    @app.middleware("http")
    async def _count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = _route_template(request)
        # Methods are the client's text: any other than the standard ones is one label, `other`.
        method = request.method if request.method in _METHODS else "other"
        metrics.requests.labels(method, route, str(response.status_code)).inc()
        metrics.request_seconds.labels(route).observe(time.perf_counter() - started)
        return response
