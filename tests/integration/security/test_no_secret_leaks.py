"""No secret reaches a log line or an API answer: real service processes (ticker, dlq, api, and
the stats worker from its own environment) run with a password in their DSN (or in
SLOTFLOW_PG_PASSWORD), a webhook signing key, a webhook URL with a password and the api's
bootstrap token (the bearer of every request), through a normal start and stop and through
failures (PostgreSQL unreachable, a database that does not exist, Kafka SASL credentials the
plaintext broker cannot take, SASL settings refused for a missing user name), and their whole
output, plus the api's answers, is scanned for each secret, and for any 16 characters of one (a
message that quotes a setting can cut it short). The failure logs must show the DSN masked: the
secret was there and was caught."""

import asyncio
import json
import uuid
from pathlib import Path

import httpx

from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import ServiceProcess, free_port, stack_env
from tests.integration.security.conftest import REPO

#: The stats worker runs from its own environment (faust; decision 0005).
STATS_PYTHON = REPO / ".venv-stats" / "bin" / "python"
#: Shortest piece of a secret that counts as leaked: pydantic, quoting the settings it refuses,
#: shows only the first and last 25 characters of them.
FRAGMENT = 16


def _secret(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex}"


def _leaked(secret: str, text: str) -> bool:
    """Whether ``text`` holds ``secret``, or any FRAGMENT characters of its random part."""
    random_part = secret.rsplit("-", 1)[-1]
    pieces = {random_part[i : i + FRAGMENT] for i in range(len(random_part) - FRAGMENT + 1)}
    return secret in text or any(piece in text for piece in pieces)


def _stats(name: str, env: dict[str, str], log_dir: Path, health_port: int = 0) -> ServiceProcess:
    """The stats worker as a process of its own environment, with ``env`` and a data directory."""
    if not STATS_PYTHON.exists():
        raise AssertionError(f"{STATS_PYTHON} is missing: run `make setup` (it builds the stats environment)")
    env = {
        **env,
        "SLOTFLOW_STATS_DATA_DIR": str(log_dir / f"{name}-faust"),
        "SLOTFLOW_STATS_FLUSH_INTERVAL_SECONDS": "0.5",
        "SLOTFLOW_STATS_HEALTH_PORT": str(health_port),
    }
    return ServiceProcess(
        "slotflow_stats", name, env=env, log_dir=log_dir, cwd=REPO, args=("worker",), python=STATS_PYTHON
    )


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
            "stats-pw",
            "stats-env-pw",
            "stats-sasl-pw",
            "stats-refused-pw",
            "stats-oauth-token",
            "stats-key-pw",
            "stats-down-pw",
        )
    }
    ticker_port, dlq_port, api_port, stats_port = free_port(), free_port(), free_port(), free_port()
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
    # JSON lines, as deployments log (deploy/kubernetes/config.yaml): faust's lines included.
    stats_env = {
        **stack_env(kafka, _with_password(pg_dsn, secrets["stats-pw"])),
        "SLOTFLOW_PG_PASSWORD": secrets["stats-env-pw"],
        "SLOTFLOW_LOG_FORMAT": "json",
    }
    stats = _stats("stats", stats_env, tmp_path, health_port=stats_port)
    answers: list[str] = []
    try:
        await assert_eventually(ticker.ready, timeout=90, message="the ticker serves metrics")
        await assert_eventually(dlq.ready, timeout=90, message="the dlq serves metrics")

        async def stats_copied() -> bool:
            if not stats.alive():
                raise AssertionError(f"the stats worker exited: {stats.log()}")
            try:
                async with httpx.AsyncClient(timeout=2) as probe:
                    response = await probe.get(f"http://127.0.0.1:{stats_port}/readyz")
            except httpx.HTTPError:
                return False
            return response.status_code == 200

        # Ready: it consumed, and copied its windows to PostgreSQL with the password it was given.
        await assert_eventually(stats_copied, timeout=120, message="the stats worker copied to PostgreSQL")
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
        stats.stop(timeout=30.0)  # faust's shutdown is slow

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
    # The stats worker's failures: SASL credentials the plaintext broker cannot take (it exits at
    # its first connection), SASL settings refused for a missing user name (pydantic quotes the
    # settings it refuses, the secrets among them), and PostgreSQL unreachable.
    plain = stack_env(kafka, _with_password(pg_dsn, secrets["stats-pw"]))
    stats_sasl = _stats(
        "stats-sasl",
        {
            **plain,
            "SLOTFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "SLOTFLOW_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "SLOTFLOW_KAFKA_SASL_USERNAME": "stats",
            "SLOTFLOW_KAFKA_SASL_PASSWORD": secrets["stats-sasl-pw"],
        },
        tmp_path,
    )
    # As a deployment sets them: without SSL_CHECK_HOSTNAME (stack_env spells it out), the key
    # password is the last setting, the one pydantic's shortened quote shows.
    unchecked = {k: v for k, v in plain.items() if not k.startswith("SLOTFLOW_KAFKA_SSL_")}
    stats_refused = _stats(
        "stats-sasl-refused",
        {
            **unchecked,
            "SLOTFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "SLOTFLOW_KAFKA_SASL_MECHANISM": "PLAIN",
            "SLOTFLOW_KAFKA_SASL_PASSWORD": secrets["stats-refused-pw"],
            "SLOTFLOW_KAFKA_SASL_OAUTH_TOKEN": secrets["stats-oauth-token"],
            "SLOTFLOW_KAFKA_SSL_KEY_PASSWORD": secrets["stats-key-pw"],
        },
        tmp_path,
    )
    stats_down = _stats(
        "stats-pg-down",
        stack_env(kafka, _with_port(_with_password(pg_dsn, secrets["stats-down-pw"]), free_port())),
        tmp_path,
    )
    codes = await asyncio.gather(
        _exited(down), _exited(nodb), _exited(stats_sasl), _exited(stats_refused), _exited(stats_down)
    )
    assert all(code != 0 for code in codes), codes

    logs = {path.name: path.read_text(errors="replace") for path in sorted(tmp_path.glob("*.log"))}
    assert set(logs) == {
        "ticker.log",
        "dlq.log",
        "api.log",
        "ticker-pg-down.log",
        "ticker-no-db.log",
        "stats.log",
        "stats-sasl.log",
        "stats-sasl-refused.log",
        "stats-pg-down.log",
    }
    everything = "\n".join([*logs.values(), *answers])
    leaked = {kind: secret for kind, secret in secrets.items() if _leaked(secret, everything)}
    assert not leaked, f"secrets in the output: {sorted(leaked)}"
    # The failures did name the database: masked, not left out.
    assert "PostgreSQL not reachable yet" in logs["ticker-pg-down.log"]
    assert "postgresql://slotflow:***@127.0.0.1:" in logs["ticker-pg-down.log"]
    assert 'database "no_such_db" does not exist' in logs["ticker-no-db.log"]
    # So did the stats worker's, and it logged through the same masking handler as the others:
    # faust's lines too are slotflow's JSON objects, not faust's own format.
    assert "cannot connect to PostgreSQL at postgresql://slotflow:***@127.0.0.1:" in logs["stats-pg-down.log"]
    assert "SLOTFLOW_KAFKA_SASL_USERNAME" in logs["stats-sasl-refused.log"]
    stats_lines = [json.loads(line) for line in logs["stats.log"].splitlines()]
    assert any(line["logger"].startswith("faust.") for line in stats_lines), logs["stats.log"][:2000]
    # The api's readiness and error answers were produced (not empty pages).
    assert any(a.startswith("/readyz 200") for a in answers), answers
    assert any(a.startswith("/v1/schedules/nope 404") for a in answers), answers
    assert any(a.startswith("wrong-token 401") for a in answers), answers
