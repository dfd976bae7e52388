"""`make demo`: the whole system on the real Kafka and PostgreSQL, end to end, in about a minute.

It starts a ticker, two claimers (with the payout handler from examples/payouts and the order
saga's activities from examples/orders), the orchestrator (serving the order saga), the DLQ
service and the api as separate processes, in a fresh topic namespace and a fresh database, then:

1. creates a payout schedule firing every 2 seconds and a schedule whose payload is refused
   (a permanent error), through the HTTP API;
2. starts two checkouts of the order saga over HTTP: one whose capture succeeds, one whose card
   declines the capture for good, so the saga releases the stock, then voids the authorization;
3. SIGKILLs one claimer halfway, so its partitions and leases move to the other;
4. shows the runs, the slot audit, the DLQ, the payout ledger (one payout per slot, none twice)
   and the two workflows: completed, and failed with `compensated: true`.

Everything it prints comes from the running services (HTTP API) and the ledger table.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from slotflow.kafka.admin import describe_cluster, ensure_topics
from slotflow.settings import KafkaSettings, PostgresSettings

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PAYOUTS = EXAMPLES / "payouts"
RUN_SECONDS = 24
#: The order saga's hold between authorization and capture, shortened from its 24 hours.
ORDER_HOLD = "PT3S"


def say(text: str = "") -> None:
    print(text, flush=True)  # noqa: T201


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_database(dsn: str, database: str) -> str:
    # The query kept (sslmode, sslrootcert), and split off first: its paths hold slashes too.
    head, sep, query = dsn.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{database}{sep}{query}"


class Stack:
    """The slotflow services as child processes sharing one namespace and database."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, module: str, *args: str, extra: dict[str, str] | None = None) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(  # noqa: S603 - our own interpreter and modules
            [sys.executable, "-m", module, *args],
            env={**self.env, **(extra or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    def kill(self, name: str) -> None:
        self.processes[name].send_signal(signal.SIGKILL)
        self.processes[name].wait()

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 25
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()


async def wait_ready(client: httpx.AsyncClient, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if (await client.get("/readyz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.5)
    raise SystemExit("the api did not become ready; see the logs printed above")


async def create_schedule(client: httpx.AsyncClient, schedule_id: str, payload: dict[str, Any]) -> None:
    body = {
        "schedule_id": schedule_id,
        "definition": {
            "spec": {"kind": "cron", "expression": "*/2 * * * * *", "timezone": "Europe/Berlin"},
            "handler": "payouts.pay_merchants",
            "payload": payload,
            "misfire": {"policy": "fire_all"},
            "overlap": "allow",
            "retry": {"base": "PT0.2S", "cap": "PT1S", "max_attempts": 3},
            "tags": ["money-moving"],
        },
    }
    response = await client.post("/v1/schedules", json=body, params={"wait": 20})
    response.raise_for_status()
    say(f"  {schedule_id}: command {response.json()['command_id']} -> {response.json()['status']}")


async def start_checkout(client: httpx.AsyncClient, workflow_id: str, card_token: str) -> None:
    order = {
        "order_id": workflow_id,
        "customer_id": "c-7",
        "amount_cents": 9990,
        "card_token": card_token,
        "lines": [{"sku": "mug", "quantity": 2}],
        "hold": ORDER_HOLD,
    }
    body = {"workflow_id": workflow_id, "workflow_type": "orders.checkout", "input": order}
    response = await client.post("/v1/workflows", json=body, params={"wait": 20})
    response.raise_for_status()
    say(
        f"  {workflow_id} (card {card_token}): command {response.json()['command_id']} -> {response.json()['status']}"
    )


async def main() -> int:
    kafka = KafkaSettings()
    postgres = PostgresSettings()
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")

    say("== 1. The infrastructure is real")
    info = await describe_cluster(kafka.bootstrap)
    produce = info.api("Produce")
    say(
        f"  Kafka at {kafka.bootstrap}: cluster id {info.cluster_id}, brokers {list(info.broker_ids)}, "
        f"Produce API v{produce.min_version if produce else '?'}-v{produce.max_version if produce else '?'}"
    )
    admin = await asyncpg.connect(postgres.dsn)
    try:
        say(f"  PostgreSQL: {await admin.fetchval('SELECT version()')}")
        database = f"slotflow_demo_{stamp}"
        await admin.execute(f'CREATE DATABASE "{database}"')
    finally:
        await admin.close()
    dsn = with_database(postgres.dsn, database)
    namespace = f"demo-{stamp}"
    settings = kafka.model_copy(update={"topic_namespace": namespace})
    await ensure_topics(kafka.bootstrap, settings.topics())
    ledger = await asyncpg.connect(dsn)
    await ledger.execute((PAYOUTS / "ledger.sql").read_text())
    say(f"  fresh database {database}, topic namespace {namespace}")

    logs = ROOT / ".devstack" / "demo-logs" / stamp
    logs.mkdir(parents=True, exist_ok=True)
    port = free_port()
    bootstrap = "sft_" + secrets.token_urlsafe(32)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(PAYOUTS), str(EXAMPLES), os.environ.get("PYTHONPATH", "")]),
        "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": namespace,
        "SLOTFLOW_PG_DSN": dsn,
        "SLOTFLOW_TICKER_METRICS_PORT": "0",
        "SLOTFLOW_CLAIMER_HANDLER_MODULES": "payouts,orders.activities",
        "SLOTFLOW_ORCHESTRATOR_WORKFLOW_MODULES": "orders.workflow",
        "SLOTFLOW_CLAIMER_LEASE_TTL_SECONDS": "4",
        "SLOTFLOW_API_PORT": str(port),
        # Authentication stays on: the demo's own one-off admin token (never printed) creates a
        # read token for the dashboard, and drives everything else itself.
        "SLOTFLOW_API_BOOTSTRAP_TOKEN": bootstrap,
    }
    stack = Stack(env, logs)
    say(
        f"\n== 2. Starting ticker, two claimers, orchestrator, dlq and api (logs in {logs.relative_to(ROOT)})"
    )
    stack.start("ticker", "slotflow_ticker")
    stack.start("claimer-a", "slotflow_claimer")
    stack.start("claimer-b", "slotflow_claimer")
    stack.start("orchestrator", "slotflow_orchestrator")
    stack.start("dlq", "slotflow_dlq")
    stack.start("api", "slotflow_api", "serve")
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=30, headers={"Authorization": f"Bearer {bootstrap}"}
        ) as client:
            await wait_ready(client)
            viewer = await client.post("/v1/tokens", json={"name": f"demo-viewer-{stamp}", "scope": "read"})
            viewer.raise_for_status()
            say(f"  api ready on http://127.0.0.1:{port} (dashboard at /ui/)")
            say(f"  a read-only token for the dashboard: {viewer.json()['secret']}")

            say("\n== 3. Two schedules, every 2 seconds, created over HTTP")
            started = datetime.now(UTC)
            await create_schedule(client, "merchant-42", {"merchant_id": "m-42", "amount_cents": 1250})
            await create_schedule(client, "merchant-broken", {"merchant_id": "m-0", "amount_cents": -1})

            say("\n== 4. Two checkouts of the order saga (examples/orders), started over HTTP")
            await start_checkout(client, "order-ok", "tok_visa")
            await start_checkout(client, "order-declined", "tok_capture_declined")

            await asyncio.sleep(RUN_SECONDS / 2)
            say("\n== 5. SIGKILL claimer-a mid-stream: its partitions and leases move to claimer-b")
            stack.kill("claimer-a")
            await asyncio.sleep(RUN_SECONDS / 2)
            # Pause so the last slots settle before the report.
            await client.post("/v1/schedules/merchant-42/pause", json={"reason": "demo over"})
            await client.post("/v1/schedules/merchant-broken/pause", json={"reason": "demo over"})
            await asyncio.sleep(6)

            await report(client, ledger, started)
            await report_checkouts(client)
    finally:
        stack.stop_all()
        await ledger.close()
    say(f"\nDone. Services stopped; database {database} and namespace {namespace} are kept for a look.")
    return 0


async def report(client: httpx.AsyncClient, ledger: asyncpg.Connection[Any], started: datetime) -> None:
    runs = (await client.get("/v1/schedules/merchant-42/runs", params={"limit": 500})).json()["items"]
    say(f"\n== 6. Runs of merchant-42 (read model over HTTP): {len(runs)}")
    say(f"  {'run id':<42} {'state':<12} {'attempts':>8} {'token':>6}  owner")
    for run in runs[-8:]:
        attempts = len(run.get("attempts") or [])
        say(
            f"  {run['run_id']:<42} {run['state']:<12} {attempts:>8} {run.get('fence_token') or '-':>6}  "
            f"{(run.get('owner') or '-')[:30]}"
        )

    ended = datetime.now(UTC)
    audit = (
        await client.get(
            "/v1/audit",
            params={
                "schedule": "merchant-42",
                "from": (started - timedelta(seconds=2)).isoformat(),
                "to": (ended - timedelta(seconds=8)).isoformat(),
            },
        )
    ).json()
    say(f"\n== 7. Slot audit for merchant-42: expected {audit.get('expected')}, {audit.get('summary')}")

    dead = (await client.get("/v1/dlq", params={"limit": 5})).json()["items"]
    say(f"\n== 8. DLQ: {len(dead)} parked (the refused payout is permanent: never retried)")
    for item in dead[:3]:
        say(f"  {item.get('dead_letter_id')}: {item.get('reason')} ({item.get('job_id')})")

    paid = await ledger.fetchrow(
        "SELECT count(*) AS rows, count(DISTINCT run_id) AS slots, coalesce(max(fence_token), 0) AS top "
        "FROM payouts_ledger"
    )
    if paid is None:  # an aggregate always returns its one row
        raise SystemExit("the payout ledger query returned no row")
    say(
        f"\n== 9. Payout ledger: {paid['rows']} payouts for {paid['slots']} distinct slots "
        f"(highest fence token {paid['top']}) -> {'one payout per slot' if paid['rows'] == paid['slots'] else 'DUPLICATES'}"
    )


async def report_checkouts(client: httpx.AsyncClient) -> None:
    say("\n== 10. The two checkouts (read model of the workflow history, over HTTP)")
    for workflow_id in ("order-ok", "order-declined"):
        shown = await settled_workflow(client, workflow_id)
        ended = shown["status"]
        if shown.get("compensated") is not None:
            ended += f", compensated: {str(shown['compensated']).lower()}"
        say(f"  {workflow_id}: {ended}")
        for step in shown["steps"]:
            role = "undo " if step["compensation"] else "step "
            error = step.get("error") or {}
            detail = f" ({error.get('type', '')}: {error.get('message', '')})" if error else ""
            say(f"    {role}#{step['sequence']:<3} {step['activity']:<20} {step['state']}{detail}")
        if shown["status"] == "completed":
            say(f"    result: {shown['result']}")
        else:
            order = " then ".join(c["activity"] for c in shown["compensations"])
            say(f"    compensations, newest step first: {order}")


async def settled_workflow(
    client: httpx.AsyncClient, workflow_id: str, seconds: float = 60
) -> dict[str, Any]:
    """The workflow's detail once it ended (or as it stands after ``seconds``)."""
    deadline = time.monotonic() + seconds
    while True:
        response = await client.get(f"/v1/workflows/{workflow_id}")
        shown: dict[str, Any] = response.json()
        ended = response.status_code == 200 and shown["status"] in {
            "completed",
            "failed",
            "terminated",
            "cancelled",
        }
        if ended or time.monotonic() > deadline:
            return shown
        await asyncio.sleep(0.5)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
