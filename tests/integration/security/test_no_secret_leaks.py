"""No secret reaches a log line or an API answer: real service processes (ticker, dlq, api) run
with a password in their DSN (or in SLOTFLOW_PG_PASSWORD), a webhook signing key, a webhook URL
with a password and the api's bootstrap token (the bearer of every request), through a normal
start and stop and through failures (PostgreSQL unreachable, a database that does not exist), and
their whole output, plus the api's answers, is scanned for each secret. The failure logs must show
the DSN masked: the secret was there and was caught."""

import asyncio
import uuid
from pathlib import Path

import httpx

from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import ServiceProcess, free_port, stack_env
from tests.integration.security.conftest import REPO


def _secret(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex}"


def _with_password(dsn: str, password: str) -> str:
    """postgresql://slotflow@host/db as postgresql://slotflow:<password>@host/db."""
    scheme, rest = dsn.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user}:{password}@{host}"


def _with_port(dsn: str, port: int) -> str:
    scheme, rest = dsn.split("://", 1)
    userinfo, tail = rest.split("@", 1)
    _, path = tail.split("/", 1)
    return f"{scheme}://{userinfo}@127.0.0.1:{port}/{path}"


def _with_database(dsn: str, database: str) -> str:
    head, sep, query = dsn.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{database}{sep}{query}"


async def _exited(process: ServiceProcess, timeout: float = 60) -> int:
    code = await asyncio.to_thread(process.proc.wait, timeout)
    process.close()
    return code


async def test_no_secret_in_any_log_line_or_answer(kafka: KafkaSettings, pg_dsn: str, tmp_path: Path) -> None:
    secrets = {
        kind: _secret(kind)
        for kind in (
            "ticker-pw",
            "dlq-pw",
            "api-pw",
            "hmac",
            "hook-pw",
            "down-pw",
            "nodb-pw",
            "env-pw",
            "token",
        )
    }
    ticker_port, dlq_port, api_port = free_port(), free_port(), free_port()
    ticker = ServiceProcess(
        "slotflow_ticker",
        "ticker",
        env=stack_env(
            kafka,
            _with_password(pg_dsn, secrets["ticker-pw"]),
            "SLOTFLOW_TICKER_",
            ticker_id="leaks",
            metrics_port=ticker_port,
        ),
        log_dir=tmp_path,
        cwd=REPO,
        metrics_port=ticker_port,
    )
    dlq_env = stack_env(
        kafka,
        _with_password(pg_dsn, secrets["dlq-pw"]),
        "SLOTFLOW_DLQ_",
        metrics_port=dlq_port,
        webhook_secret=secrets["hmac"],
        webhook_url=f"http://hook:{secrets['hook-pw']}@127.0.0.1:9/notify",
    )
    dlq_env["SLOTFLOW_LOG_FORMAT"] = "json"
    dlq = ServiceProcess(
        "slotflow_dlq", "dlq", env=dlq_env, log_dir=tmp_path, cwd=REPO, metrics_port=dlq_port
    )
    api_env = stack_env(kafka, _with_password(pg_dsn, secrets["api-pw"]), "SLOTFLOW_API_", port=api_port)
    api_env["SLOTFLOW_PG_PASSWORD"] = secrets["env-pw"]
    api_env["SLOTFLOW_API_BOOTSTRAP_TOKEN"] = secrets["token"]
    api = ServiceProcess("slotflow_api", "api", env=api_env, log_dir=tmp_path, cwd=REPO, args=["serve"])
    answers: list[str] = []
    try:
        await assert_eventually(ticker.ready, timeout=90, message="the ticker serves metrics")
        await assert_eventually(dlq.ready, timeout=90, message="the dlq serves metrics")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=5) as client:

            async def api_up() -> bool:
                if not api.alive():
                    raise AssertionError(f"the api exited: {api.log()}")
                try:
                    return (await client.get("/healthz")).status_code == 200
                except httpx.HTTPError:
                    return False

            await assert_eventually(api_up, timeout=90, message="the api answers")
            bearer = {"Authorization": f"Bearer {secrets['token']}"}
            for path in ("/readyz", "/v1/schedules", "/v1/schedules/nope", "/v1/runs?limit=0", "/metrics"):
                response = await client.get(path, headers=bearer)
                answers.append(f"{path} {response.status_code} {response.headers} {response.text}")
            # A wrong token's refusal does not echo what was presented.
            response = await client.get(
                "/v1/schedules", headers={"Authorization": f"Bearer {secrets['token']}x"}
            )
            answers.append(f"wrong-token {response.status_code} {response.headers} {response.text}")
    finally:
        for process in (ticker, dlq, api):
            process.stop()

    # Failures: PostgreSQL not there (a start-up wait, then the crash), and a database that does not exist.
    down = ServiceProcess(
        "slotflow_ticker",
        "ticker-pg-down",
        env={
            **stack_env(
                kafka, _with_port(_with_password(pg_dsn, secrets["down-pw"]), free_port()), metrics_port=0
            ),
            "SLOTFLOW_PG_STARTUP_WAIT_SECONDS": "1.5",
        },
        log_dir=tmp_path,
        cwd=REPO,
    )
    nodb = ServiceProcess(
        "slotflow_ticker",
        "ticker-no-db",
        env=stack_env(
            kafka, _with_database(_with_password(pg_dsn, secrets["nodb-pw"]), "no_such_db"), metrics_port=0
        ),
        log_dir=tmp_path,
        cwd=REPO,
    )
    codes = await asyncio.gather(_exited(down), _exited(nodb))
    assert all(code != 0 for code in codes), codes

    logs = {path.name: path.read_text(errors="replace") for path in sorted(tmp_path.glob("*.log"))}
    assert set(logs) == {"ticker.log", "dlq.log", "api.log", "ticker-pg-down.log", "ticker-no-db.log"}
    everything = "\n".join([*logs.values(), *answers])
    leaked = {kind: secret for kind, secret in secrets.items() if secret in everything}
    assert not leaked, f"secrets in the output: {sorted(leaked)}"
    # The failures did name the database: masked, not left out.
    assert "PostgreSQL not reachable yet" in logs["ticker-pg-down.log"]
    assert "postgresql://slotflow:***@127.0.0.1:" in logs["ticker-pg-down.log"]
    assert 'database "no_such_db" does not exist' in logs["ticker-no-db.log"]
    # The api's readiness and error answers were produced (not empty pages).
    assert any(a.startswith("/readyz 200") for a in answers), answers
    assert any(a.startswith("/v1/schedules/nope 404") for a in answers), answers
    assert any(a.startswith("wrong-token 401") for a in answers), answers
