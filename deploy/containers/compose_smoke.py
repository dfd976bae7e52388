"""Drives a slotflow brought up by compose.yaml through its api (deploy/containers/check-compose.sh).

What it shows, or it exits non-zero saying which part did not happen:

1. the api is ready (it reached Kafka and PostgreSQL inside the compose network);
2. a payout schedule created over HTTP fires every 2 seconds and its runs complete on the
   claimers (the examples' payout handler, writing the ledger in the compose PostgreSQL);
3. two checkouts of the order saga run on the orchestrators: one completes, the other's card is
   declined and the saga compensates (release, then void), ending `failed` with `compensated: true`;
   the completed one answers its `stage` query through the api and an orchestrator's listener.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

LEDGER_SQL = Path(__file__).resolve().parents[2] / "examples" / "payouts" / "ledger.sql"


class SmokeFailed(Exception):
    """A part of the compose deployment did not do what it must."""


def say(text: str) -> None:
    print(f"compose-smoke: {text}", flush=True)


async def wait_ready(client: httpx.AsyncClient, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            response = await client.get("/readyz")
            if response.status_code == 200:
                return
            last = f"{response.status_code} {response.text[:200]}"
        except httpx.TransportError as exc:
            last = repr(exc)
        await asyncio.sleep(1)
    raise SmokeFailed(f"the api was not ready after {seconds:.0f} s (last: {last})")


async def create_payout_schedule(client: httpx.AsyncClient) -> None:
    body = {
        "schedule_id": "compose-payout",
        "definition": {
            "spec": {"kind": "cron", "expression": "*/2 * * * * *", "timezone": "UTC"},
            "handler": "payouts.pay_merchants",
            "payload": {"merchant_id": "m-42", "amount_cents": 1250},
        },
    }
    response = await client.post("/v1/schedules", json=body, params={"wait": 30})
    # With ?wait= an acknowledged command answers 200 with status "accepted" (docs/api.md).
    if response.status_code != 200 or response.json().get("status") != "accepted":
        raise SmokeFailed(f"creating the schedule answered {response.status_code}: {response.text[:300]}")


async def start_checkout(client: httpx.AsyncClient, workflow_id: str, card_token: str) -> None:
    order = {
        "order_id": workflow_id,
        "customer_id": "c-7",
        "amount_cents": 9990,
        "card_token": card_token,
        "lines": [{"sku": "mug", "quantity": 2}],
        "hold": "PT1S",
    }
    body = {"workflow_id": workflow_id, "workflow_type": "orders.checkout", "input": order}
    response = await client.post("/v1/workflows", json=body, params={"wait": 30})
    if response.status_code != 200 or response.json().get("status") != "accepted":
        raise SmokeFailed(f"starting {workflow_id} answered {response.status_code}: {response.text[:300]}")


async def completed_runs(client: httpx.AsyncClient, at_least: int, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    count = 0
    while time.monotonic() < deadline:
        response = await client.get("/v1/runs", params={"job_id": "compose-payout", "state": "completed"})
        if response.status_code == 200:
            count = len(response.json()["items"])
            if count >= at_least:
                return count
        await asyncio.sleep(1)
    raise SmokeFailed(f"only {count} completed payout runs after {seconds:.0f} s (wanted {at_least})")


async def ended_workflow(client: httpx.AsyncClient, workflow_id: str, seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    shown: dict[str, Any] = {}
    while time.monotonic() < deadline:
        response = await client.get(f"/v1/workflows/{workflow_id}")
        if response.status_code == 200:
            shown = response.json()
            if shown["status"] in {"completed", "failed", "cancelled", "terminated"}:
                return shown
        await asyncio.sleep(1)
    raise SmokeFailed(
        f"{workflow_id} had not ended after {seconds:.0f} s: {shown.get('status', 'not found')}"
    )


async def smoke(api: str, pg: str, token: str) -> None:
    ledger = await asyncpg.connect(pg)
    try:
        await ledger.execute(LEDGER_SQL.read_text())
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=api, timeout=40, headers=headers) as client:
            await wait_ready(client, 120)
            say("api ready")
            # The image's api runs with authentication on: a request without the token is refused.
            anonymous = await client.get("/v1/schedules", headers={"Authorization": ""})
            if anonymous.status_code != 401:
                raise SmokeFailed(f"a request without a token answered {anonymous.status_code}, not 401")
            await create_payout_schedule(client)
            await start_checkout(client, "compose-order-ok", "tok_visa")
            await start_checkout(client, "compose-order-declined", "tok_capture_declined")
            say("schedule created and two checkouts started over HTTP")
            runs = await completed_runs(client, at_least=3, seconds=90)
            payouts = await ledger.fetchval("SELECT count(*) FROM payouts_ledger")
            say(f"{runs} payout runs completed; {payouts} ledger rows")
            if not payouts:
                raise SmokeFailed("runs completed but the ledger holds no payout")
            ok = await ended_workflow(client, "compose-order-ok", 120)
            if ok["status"] != "completed":
                raise SmokeFailed(f"compose-order-ok ended {ok['status']}, not completed")
            # A query reaches the orchestrator that holds the workflow, across the compose network.
            asked = await client.post("/v1/workflows/compose-order-ok/query", json={"query": "stage"})
            if asked.status_code != 200 or asked.json().get("result") != "capturing":
                raise SmokeFailed(
                    f"the query of compose-order-ok answered {asked.status_code}: {asked.text[:300]}"
                )
            say("compose-order-ok's query answered through the api and an orchestrator's listener")
            declined = await ended_workflow(client, "compose-order-declined", 120)
            undone = [c["activity"] for c in declined.get("compensations", [])]
            if declined["status"] != "failed" or declined.get("compensated") is not True:
                raise SmokeFailed(
                    f"compose-order-declined ended {declined['status']}, compensated {declined.get('compensated')}"
                )
            say(
                f"compose-order-ok completed; compose-order-declined failed, compensated by {' then '.join(undone)}"
            )
    finally:
        await ledger.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--api", required=True, help="the api's base URL on the host")
    parser.add_argument("--pg", required=True, help="the compose PostgreSQL's DSN on the host")
    args = parser.parse_args()
    token = os.environ.get("SLOTFLOW_TOKEN", "")
    if not token:
        say("SLOTFLOW_TOKEN is not set: the api's token (compose's SLOTFLOW_API_BOOTSTRAP_TOKEN)")
        return 2
    try:
        asyncio.run(smoke(args.api, args.pg, token))
    except SmokeFailed as exc:
        say(f"FAILED: {exc}")
        return 1
    say("passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
