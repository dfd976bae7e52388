"""Authentication and authorisation of the API on the real Kafka and PostgreSQL.

Tokens are created through the API with the bootstrap token, each scope is tried on representative
routes of every scope, the principal of a pause and of a discard is followed through the real
ticker and dlq service into the commands, the audit and the dead letter, a revoked token is
refused, an empty DLQ selection needs `all: true`, auth off is said at start-up, OIDC JWTs are
checked against a JWKS served by a local HTTP server, and CORS stays closed unless configured.
"""

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI
from jwt.algorithms import RSAAlgorithm

from slotflow.contracts import JobDue, wrap
from slotflow.contracts.codec import encode
from slotflow.contracts.topics import JOBS_DUE
from slotflow.core.identity import job_due_event_id
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import create_pool
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow_api.app import create_app
from slotflow_api.auth import ROUTE_SCOPES
from slotflow_api.config import Settings
from slotflow_api.projector import rebuild
from tests.integration.api.conftest import AUTH
from tests.integration.dlq.conftest import start_dlq, stop_dlq
from tests.integration.dlq.helpers import origin, park
from tests.integration.ticker.support import start_ticker, stop_ticker

CLIENT = {"X-Slotflow-Client": "test"}
DEFINITION = {"spec": {"kind": "interval", "every": "PT1H"}, "handler": "reports.build"}
SLOT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)


@pytest.fixture
async def anonymous(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the same app that sends no token."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test", headers=CLIENT) as http:
        yield http


async def _token(client: httpx.AsyncClient, scope: str) -> tuple[str, str]:
    """A fresh token of ``scope`` created through the API; its name and its secret."""
    name = unique_name(scope)
    created = await client.post("/v1/tokens", json={"name": name, "scope": scope})
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["secret"].startswith("sft_")
    assert body["scope"] == scope
    assert body["created_by"] == "bootstrap"
    return name, str(body["secret"])


def _as(secret: str) -> dict[str, str]:
    return {**CLIENT, "Authorization": f"Bearer {secret}"}


def _concrete(path: str) -> str:
    return path.replace("{", "").replace("}", "")


async def test_without_a_token_every_api_route_is_401_but_health_readiness_and_metrics(
    anonymous: httpx.AsyncClient,
) -> None:
    for (method, path), scope in ROUTE_SCOPES.items():
        empty: dict[str, Any] | None = {} if method in ("POST", "PUT", "PATCH") else None
        response = await anonymous.request(method, _concrete(path), json=empty)
        if scope is None:
            assert response.status_code == 200, (method, path, response.text)
            continue
        assert response.status_code == 401, (method, path, response.status_code, response.text)
        assert response.headers["www-authenticate"].startswith("Bearer"), (method, path)
        assert "Authorization: Bearer" in response.json()["detail"], (method, path)
    garbage = await anonymous.get(
        "/v1/schedules", headers={"Authorization": "Bearer sft_0123456789ab_" + "x" * 43}
    )
    assert garbage.status_code == 401
    assert 'error="invalid_token"' in garbage.headers["www-authenticate"]
    basic = await anonymous.get("/v1/schedules", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert basic.status_code == 401
    assert "Bearer <token>" in basic.json()["detail"]


async def test_each_scope_allows_its_routes_and_is_403_on_the_next(
    client: httpx.AsyncClient, anonymous: httpx.AsyncClient
) -> None:
    _, read = await _token(client, "read")
    _, operate = await _token(client, "operate")
    _, admin = await _token(client, "admin")
    sid = unique_name("scoped")
    selection = {"selection": {"ids": ["nowhere:0:1"]}}

    async def call(secret: str, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        return await anonymous.request(method, path, json=body, headers=_as(secret))

    # read: queries of every kind; no command, no token management.
    for path in ("/v1/schedules", "/v1/runs", "/v1/dlq", "/v1/commands", "/v1/stats/topics", "/v1/handlers"):
        assert (await call(read, "GET", path)).status_code == 200, path
    for method, path, body in (
        ("POST", f"/v1/schedules/{sid}/pause", {}),
        ("POST", "/v1/dlq/redrive", selection),
        ("POST", "/v1/schedules", {"schedule_id": sid, "definition": DEFINITION}),
        ("GET", "/v1/tokens", None),
    ):
        refused = await call(read, method, path, body)
        assert refused.status_code == 403, (method, path, refused.text)
        assert "holds 'read'" in refused.json()["detail"]
        assert 'error="insufficient_scope"' in refused.headers["www-authenticate"]

    # operate: reads, and pauses, triggers, redrives; not schedule definitions or tokens.
    assert (await call(operate, "GET", "/v1/schedules")).status_code == 200
    assert (await call(operate, "POST", f"/v1/schedules/{sid}/pause", {})).status_code == 202
    assert (await call(operate, "POST", f"/v1/schedules/{sid}/trigger")).status_code == 202
    assert (await call(operate, "POST", "/v1/dlq/redrive", selection)).status_code == 202
    admin_only: tuple[tuple[str, str, dict[str, Any] | None], ...] = (
        ("POST", "/v1/schedules", {"schedule_id": sid, "definition": DEFINITION}),
        ("DELETE", f"/v1/schedules/{sid}", None),
        ("POST", "/v1/tokens", {"name": "x", "scope": "read"}),
    )
    for method, path, body in admin_only:
        refused = await call(operate, method, path, body)
        assert refused.status_code == 403, (method, path, refused.text)
        assert "needs the 'admin' scope" in refused.json()["detail"]

    # admin: everything.
    assert (
        await call(admin, "POST", "/v1/schedules", {"schedule_id": sid, "definition": DEFINITION})
    ).status_code == 202
    assert (await call(admin, "POST", f"/v1/schedules/{sid}/resume", {})).status_code == 202
    listed = await call(admin, "GET", "/v1/tokens")
    assert listed.status_code == 200
    assert all("secret" not in t and "secret_sha256" not in t for t in listed.json())


async def test_a_revoked_token_is_refused_and_the_secret_is_not_stored(
    client: httpx.AsyncClient, anonymous: httpx.AsyncClient, api_settings: Settings
) -> None:
    name, secret = await _token(client, "read")
    assert (await anonymous.get("/v1/schedules", headers=_as(secret))).status_code == 200
    import asyncpg

    conn = await asyncpg.connect(api_settings.postgres.dsn)
    try:
        stored = await conn.fetchval("SELECT count(*) FROM api.api_tokens WHERE name = $1", name)
        leaked = await conn.fetchval(
            "SELECT count(*) FROM api.api_tokens WHERE position($1::bytea IN secret_sha256) > 0",
            secret.encode(),
        )
    finally:
        await conn.close()
    assert (stored, leaked) == (1, 0)

    revoked = await client.delete(f"/v1/tokens/{name}")
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["revoked_by"] == "bootstrap"
    refused = await anonymous.get("/v1/schedules", headers=_as(secret))
    assert refused.status_code == 401
    assert "revoked" in refused.json()["detail"]
    assert (await client.delete(f"/v1/tokens/{name}")).status_code == 404
    # The name is free again, and a second live token with one name is refused.
    again_name = unique_name("dup")
    assert (await client.post("/v1/tokens", json={"name": again_name, "scope": "read"})).status_code == 201
    duplicate = await client.post("/v1/tokens", json={"name": again_name, "scope": "read"})
    assert duplicate.status_code == 409
    assert "revoke it first" in duplicate.json()["detail"]


async def test_an_empty_dlq_selection_needs_all_true(client: httpx.AsyncClient) -> None:
    for path, extra in (("/v1/dlq/redrive", {}), ("/v1/dlq/discard", {"reason": "cleanup"})):
        for body in ({"selection": {}, **extra}, {**extra}, {"selection": {"status": "parked"}, **extra}):
            refused = await client.post(path, json=body)
            assert refused.status_code == 422, (path, body, refused.text)
            assert '"all": true' in refused.json()["detail"], refused.text
        both = await client.post(path, json={"selection": {"topic": "t"}, "all": True, **extra})
        assert both.status_code == 422
        assert "one or the other" in both.json()["detail"]
        assert (await client.post(path, json={"all": True, **extra})).status_code == 202
        assert (await client.post(path, json={"selection": {"topic": "t"}, **extra})).status_code == 202


async def test_the_principal_of_a_pause_and_a_discard_shows_in_commands_audit_and_dead_letter(
    api_settings: Settings,
    app: FastAPI,
    client: httpx.AsyncClient,
    anonymous: httpx.AsyncClient,
    kafka: KafkaSettings,
    pg_dsn: str,
) -> None:
    name, operate = await _token(client, "operate")
    sid = unique_name("audited")
    ticker = await start_ticker(kafka, pg_dsn)
    dlq = await start_dlq(kafka, pg_dsn, metrics_port=0)
    try:
        created = await client.post(
            "/v1/schedules", params={"wait": 20}, json={"schedule_id": sid, "definition": DEFINITION}
        )
        assert created.status_code == 200, created.text
        paused = await anonymous.post(
            f"/v1/schedules/{sid}/pause",
            params={"wait": 20},
            json={"reason": "bank holiday"},
            headers=_as(operate),
        )
        assert paused.status_code == 200, paused.text
        assert paused.json()["principal"] == f"token:{name}"
        command_id = paused.json()["command_id"]

        listed = (await client.get("/v1/commands", params={"subject": sid})).json()["items"]
        by_type = {row["command_type"]: row["principal"] for row in listed}
        assert by_type == {"schedule.pause": f"token:{name}", "schedule.create": "bootstrap"}
        mine = (await client.get("/v1/commands", params={"principal": f"token:{name}"})).json()["items"]
        assert [row["command_id"] for row in mine] == [command_id]

        async def changes() -> list[dict[str, Any]] | None:
            audit = await client.get("/v1/audit", params={"schedule": sid})
            found = audit.json().get("changes", []) if audit.status_code == 200 else []
            return found if len(found) == 2 else None

        seen = await assert_eventually(changes, timeout=20, message="the audit lists both changes")
        assert [(c["change"], c["by"]) for c in seen] == [
            ("created", "bootstrap"),
            ("paused", f"token:{name}"),
        ]
        assert seen[1]["command_id"] == command_id

        # A letter parked by the real dlq service, discarded with the operate token.
        due = JobDue(run_id=f"{sid}@2026-12-02T02:00:00Z", job_id=sid, slot=SLOT, handler="reports.build")
        value = encode(
            wrap(due, id=job_due_event_id(due.run_id, 1), key=sid, source="ticker", occurred_at=SLOT)
        )
        async with Producer(kafka, client_id="auth-test") as producer:
            record = origin(kafka.topic(JOBS_DUE), 3, value, key=sid.encode())
            await park(producer, kafka, record, ValueError("bad"), job_id=sid, run_id=due.run_id)

        async def parked() -> str | None:
            items = (await client.get("/v1/dlq", params={"job_id": sid})).json()["items"]
            return str(items[0]["dead_letter_id"]) if items else None

        letter = await assert_eventually(parked, timeout=30, message="the letter parked")
        discarded = await anonymous.post(
            "/v1/dlq/discard",
            params={"wait": 20},
            json={"selection": {"ids": [letter]}, "reason": "duplicate of a paid run"},
            headers=_as(operate),
        )
        assert discarded.status_code == 200, discarded.text

        async def discarded_by() -> str | None:
            row = (await client.get(f"/v1/dlq/{letter}")).json()
            return str(row["changed_by"]) if row["status"] == "discarded" else None

        who = await assert_eventually(discarded_by, timeout=20, message="the letter shows who discarded it")
        assert who == f"token:{name}"
    finally:
        await stop_dlq(dlq)
        await stop_ticker(ticker)


async def test_auth_off_is_explicit_and_warned_and_commands_say_anonymous(
    api_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    settings = api_settings.model_copy(
        update={"api": api_settings.api.model_copy(update={"auth": "off", "bootstrap_token": None})}
    )
    with caplog.at_level(logging.WARNING, logger="slotflow_api.app"):
        application = create_app(settings)
    assert any("AUTHENTICATION IS OFF" in r.getMessage() for r in caplog.records)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://api.test", headers=CLIENT) as http:
            assert (await http.get("/v1/schedules")).status_code == 200
            # No ticker here: the command itself, once projected, carries its principal.
            sent = await http.post(f"/v1/schedules/{unique_name('open')}/trigger")
            assert sent.status_code == 202, sent.text
            command_id = sent.json()["command_id"]

            async def principal() -> str | None:
                found = (await http.get(f"/v1/commands/{command_id}")).json()
                return str(found["principal"]) if found.get("principal") else None

            assert await assert_eventually(principal, timeout=20, message="projected") == "anonymous"


def test_auth_is_on_unless_set_off_and_a_short_bootstrap_token_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pydantic import ValidationError

    from slotflow_api.config import ApiSettings

    monkeypatch.delenv("SLOTFLOW_API_AUTH", raising=False)
    assert ApiSettings().auth == "on"
    monkeypatch.setenv("SLOTFLOW_API_BOOTSTRAP_TOKEN", "short")
    with pytest.raises(ValidationError, match="at least 32 characters"):
        ApiSettings()
    monkeypatch.delenv("SLOTFLOW_API_BOOTSTRAP_TOKEN")
    monkeypatch.setenv("SLOTFLOW_API_AUTH", "maybe")
    with pytest.raises(ValidationError):
        ApiSettings()


# -- OIDC ------------------------------------------------------------------------------------------

ISSUER = "https://idp.example.test"
AUDIENCE = "slotflow-api"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return _key()


@pytest.fixture
def jwks_url(signing_key: rsa.RSAPrivateKey) -> Iterator[str]:
    """The public half of ``signing_key`` as a JWKS, served over HTTP on a loopback port."""
    jwk = json.loads(RSAAlgorithm.to_jwk(signing_key.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class Jwks(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    finally:
        server.shutdown()
        server.server_close()


def _jwt(key: rsa.RSAPrivateKey, *, kid: str = "k1", **claims: Any) -> str:
    now = int(time.time())
    payload = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice@example.com",
        "iat": now,
        "exp": now + 300,
        **claims,
    }
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": kid})


async def test_oidc_jwts_are_checked_against_the_jwks_and_mapped_to_scopes(
    api_settings: Settings, jwks_url: str, signing_key: rsa.RSAPrivateKey
) -> None:
    api = api_settings.api.model_copy(
        update={
            "oidc_jwks_url": jwks_url,
            "oidc_issuer": ISSUER,
            "oidc_audience": AUDIENCE,
            "oidc_scope_claim": "groups",
            "oidc_scope_map": {"payments-oncall": "operate", "payments-viewers": "read"},
        }
    )
    application = create_app(api_settings.model_copy(update={"api": api}))
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://api.test", headers=CLIENT) as http:

            async def call(token: str, method: str, path: str, body: Any = None) -> httpx.Response:
                return await http.request(
                    method, path, json=body, headers={"Authorization": f"Bearer {token}"}
                )

            oncall = _jwt(signing_key, groups=["payments-viewers", "payments-oncall"])
            sid = unique_name("oidc")
            assert (await call(oncall, "GET", "/v1/schedules")).status_code == 200
            paused = await call(oncall, "POST", f"/v1/schedules/{sid}/pause", {})
            assert paused.status_code == 202, paused.text
            refused = await call(
                oncall, "POST", "/v1/schedules", {"schedule_id": sid, "definition": DEFINITION}
            )
            assert refused.status_code == 403
            assert "oidc:alice@example.com holds 'operate'" in refused.json()["detail"]

            async def principal() -> str | None:
                found = (await http.get(f"/v1/commands/{paused.json()['command_id']}", headers=AUTH)).json()
                return str(found["principal"]) if found.get("principal") else None

            assert (
                await assert_eventually(principal, timeout=20, message="projected")
                == "oidc:alice@example.com"
            )

            viewer = _jwt(signing_key, groups="payments-viewers")
            assert (await call(viewer, "GET", "/v1/runs")).status_code == 200
            assert (await call(viewer, "POST", f"/v1/schedules/{sid}/resume", {})).status_code == 403
            nobody = await call(_jwt(signing_key, groups=["marketing"]), "GET", "/v1/runs")
            assert nobody.status_code == 403
            assert "grants no slotflow scope" in nobody.json()["detail"]

            for bad, why in (
                (_jwt(signing_key, groups="payments-oncall", exp=int(time.time()) - 60), "expired"),
                (_jwt(signing_key, groups="payments-oncall", aud="another-service"), "audience"),
                (_jwt(signing_key, groups="payments-oncall", iss="https://evil.example"), "issuer"),
                (_jwt(_key(), groups="payments-oncall"), "Signature verification failed"),
                (_jwt(signing_key, kid="k2", groups="payments-oncall"), "k2"),
            ):
                response = await call(bad, "GET", "/v1/runs")
                assert response.status_code == 401, (why, response.text)
                assert why.lower() in response.json()["detail"].lower(), (why, response.text)


async def test_cors_is_closed_by_default_and_open_only_to_listed_origins(api_settings: Settings) -> None:
    preflight = {
        "Origin": "https://ops.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization",
    }
    for origins, allowed in (([], False), (["https://ops.example"], True)):
        api = api_settings.api.model_copy(update={"cors_origins": origins})
        application = create_app(api_settings.model_copy(update={"api": api}))
        async with application.router.lifespan_context(application):
            transport = httpx.ASGITransport(app=application)
            async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
                answer = await http.options("/v1/schedules/x/pause", headers=preflight)
                got = await http.get("/v1/schedules", headers={"Origin": "https://ops.example", **AUTH})
        assert ("access-control-allow-origin" in answer.headers) is allowed, answer.headers
        assert ("access-control-allow-origin" in got.headers) is allowed, got.headers
        assert got.status_code == 200


async def test_a_jwks_that_does_not_answer_is_503_not_401(
    api_settings: Settings, signing_key: rsa.RSAPrivateKey
) -> None:
    api = api_settings.api.model_copy(
        update={
            "oidc_jwks_url": "http://127.0.0.1:9/jwks.json",
            "oidc_issuer": ISSUER,
            "oidc_audience": AUDIENCE,
            "oidc_jwks_timeout_seconds": 1.0,
        }
    )
    application = create_app(api_settings.model_copy(update={"api": api}))
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
            token = _jwt(signing_key, scope="slotflow:read")
            answer = await asyncio.wait_for(
                http.get("/v1/runs", headers={"Authorization": f"Bearer {token}"}), timeout=20
            )
    assert answer.status_code == 503, answer.text
    assert "JWKS" in answer.json()["detail"]


async def test_a_read_model_rebuild_keeps_the_tokens(
    client: httpx.AsyncClient, anonymous: httpx.AsyncClient, api_settings: Settings
) -> None:
    _, secret = await _token(client, "read")
    pool = await create_pool(PostgresSettings(dsn=api_settings.postgres.dsn), min_size=1, max_size=2)
    try:
        await rebuild(pool, api_settings)
    finally:
        await pool.close()
    # Tokens are not projected from any topic: emptied, they would be gone for good.
    assert (await anonymous.get("/v1/runs", headers=_as(secret))).status_code == 200
