"""The whole-system fault suite's operator: redrives of saga steps' dead letters and retries of
parked activities, through the api as a person on call would send them.

A parking order (`system.checkout.parking`, workflow.py) parks its refused reservation. For each,
the operator waits for the letter, repairs the order (handlers.repair) and resumes the saga while
it waits: a `RetryActivity` (POST /v1/workflows/{id}/activities/{n}/retry) or a redrive of the
letter by id (POST /v1/dlq/redrive), seeded. Once the saga has moved on and closed (completed, or
compensated: the reservation released), it retries the step again and redrives its letter again,
with and without a dry run: both must be refused with the reason ("... already compensated this
step ..."), changing nothing. At the end it sends bulk redrives by reason, dry run first: the
parked activities' reason (a bulk leaves workflow letters out and says so) and the workload's
poison (each owner reads the record again, finds it poison again and refuses with the reason).

The operator records what it sent; the checker judges from the topics and tables what came of it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx

from tests.chaos.system.checker import RedriveUnderTest, RetryUnderTest
from tests.chaos.system.handlers import repair

#: The share of orders that park their refused reservation, and the share of those that also
#: decline their capture (so the saga compensates the step an operator resumed). Drawn from a
#: stream of their own: the workload's other draws stay where they were for every seed.
PARK_SHARE = 0.4
PARKED_DECLINE_SHARE = 0.5
#: The share of parked steps resumed by a redrive of their letter (the rest by RetryActivity).
RESUME_BY_REDRIVE_SHARE = 0.4
#: What the api's `?wait=` waits for a command's answer, and how long the operator keeps at one act.
ANSWER_WAIT_S = 10.0
ACT_TIMEOUT_S = 120.0
#: How long the operator looks for a parking order's letter while the order is open. Its reservation
#: comes after the order's start, authorization and hold, each waiting on the orchestrators the
#: faults kill and pause: in the long profile (seed 1, 2026-12-07) letters came 100 s and more after
#: the start, and 130 orders were left parked because the operator had stopped looking at 120 s.
LETTER_WAIT_S = 900.0
#: A letter's statuses once its owner answered a redrive.
ANSWERED = frozenset({"redriven", "redrive_failed"})
#: How long a closed workflow's parked letter may still take to show in the api.
LETTER_GRACE_S = 10.0
CLOSED = frozenset({"completed", "failed", "cancelled", "terminated", "timed_out"})
#: The DLQ reasons of the bulk redrives: a parked activity's, and the workload's poison's.
PARKED_REASON = "permanent_error"
POISON_REASON = "undecodable"


class OperatorGaveUp(AssertionError):
    """The api did not answer an operator's act in time (the suite's harness error, like its others)."""


@dataclass
class Operator:
    seed: int
    base_url: str
    token: str
    dsn: str
    say: Callable[[str], None]

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed * 7907 + 61)
        self.retries: list[RetryUnderTest] = []
        self.redrives: list[RedriveUnderTest] = []
        self._numbered = 0
        # One client for the whole run: a client per call built a TLS context each time (loading
        # the CA bundle), a twelfth of the harness's CPU on a box the system under test needs.
        self._client: httpx.AsyncClient | None = None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def parks(self) -> tuple[bool, bool]:
        """Whether the next order parks its refused reservation, and whether it must then decline."""
        parks = self.rng.random() < PARK_SHARE
        return parks, parks and self.rng.random() < PARKED_DECLINE_SHARE

    def _command_id(self, what: str) -> str:
        self._numbered += 1
        return f"operator-{what}-{self._numbered}"

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One api call, again after a connection error or a 5xx (the stack restarts under faults);
        a command keeps its Idempotency-Key, so a repeat publishes it once."""
        deadline = time.monotonic() + ACT_TIMEOUT_S
        headers = {"Authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self.base_url, timeout=ANSWER_WAIT_S + 10)
        client = self._client
        while True:
            try:
                response = await client.request(method, path, headers=headers, **kwargs)
                if response.status_code < 500:
                    return response
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise OperatorGaveUp(f"{method} {path}: no answer within {ACT_TIMEOUT_S:.0f} s")
            await asyncio.sleep(1.0)

    async def _letter_of(self, workflow_id: str) -> dict[str, Any] | None:
        """The parked activity's letter of ``workflow_id``, once the api shows it (None: none came)."""
        deadline = time.monotonic() + LETTER_WAIT_S
        while time.monotonic() < deadline:
            response = await self._call("GET", "/v1/dlq", params={"workflow_id": workflow_id})
            items = response.json().get("items", []) if response.status_code == 200 else []
            letters = [item for item in items if item.get("sequence")]
            if letters:
                return dict(letters[0])
            if await self._status(workflow_id) in CLOSED:
                # Cancelled before its reservation was scheduled, or closed while it ran: a letter
                # still on its way shows within a few seconds, else none is coming.
                deadline = min(deadline, time.monotonic() + LETTER_GRACE_S)
            await asyncio.sleep(1.0)
        return None

    async def _letter_status(self, letter_id: str) -> str:
        response = await self._call("GET", f"/v1/dlq/{quote(letter_id, safe=':')}")
        return str(response.json().get("status", "parked")) if response.status_code == 200 else "parked"

    async def _redrive_answer(self, letter_id: str) -> str:
        """The letter's status once its owner answered the redrive the dlq staged (`redriven` or
        `redrive_failed`), or as it is when the operator stops waiting (the read model may still
        show it `parked` for a moment, then `redriving` until the owner answers)."""
        deadline = time.monotonic() + ANSWER_WAIT_S * 3
        while (
            status := await self._letter_status(letter_id)
        ) not in ANSWERED and time.monotonic() < deadline:
            await asyncio.sleep(1.0)
        return status

    async def _status(self, workflow_id: str) -> str:
        response = await self._call("GET", f"/v1/workflows/{quote(workflow_id, safe='')}")
        return str(response.json().get("status", "")) if response.status_code == 200 else ""

    async def _until_closed(self, workflow_id: str) -> str:
        deadline = time.monotonic() + ACT_TIMEOUT_S
        while (status := await self._status(workflow_id)) not in CLOSED and time.monotonic() < deadline:
            await asyncio.sleep(1.0)
        return status

    async def retry(self, workflow_id: str, sequence: int, *, phase: str) -> int:
        """RetryActivity through the api; the answer's HTTP status (200 accepted, 409 refused)."""
        command_id = self._command_id("retry")
        self.retries.append(RetryUnderTest(command_id, workflow_id, sequence, phase))
        response = await self._call(
            "POST",
            f"/v1/workflows/{quote(workflow_id, safe='')}/activities/{sequence}/retry",
            params={"wait": ANSWER_WAIT_S},
            headers={"Idempotency-Key": command_id},
            json={"reason": f"system operator, {phase}"},
        )
        self.say(
            f"operator: retry {workflow_id} #{sequence} ({phase}): {response.status_code} {_detail(response)}"
        )
        return response.status_code

    async def redrive(
        self, selection: dict[str, Any], *, phase: str, dry_run: bool = False
    ) -> httpx.Response:
        """A redrive through the api (``dry_run``: its preview; nothing is published)."""
        command_id = self._command_id("dry-run" if dry_run else "redrive")
        params: dict[str, Any] = {"dry_run": "true"} if dry_run else {"wait": ANSWER_WAIT_S}
        response = await self._call(
            "POST",
            "/v1/dlq/redrive",
            params=params,
            headers={} if dry_run else {"Idempotency-Key": command_id},
            json={"selection": selection, "limit": 100},
        )
        if not dry_run:
            self.redrives.append(RedriveUnderTest(command_id, phase, response.status_code))
        self.say(
            f"operator: redrive{' (dry run)' if dry_run else ''} {phase} {selection}: {response.status_code} {_detail(response)}"
        )
        return response

    async def tend(self, workflow_id: str) -> None:
        """A parking order from its parked letter to its close, and the refused acts after it."""
        letter = await self._letter_of(workflow_id)
        if letter is None:
            self.say(f"operator: no parked letter of {workflow_id} (cancelled before its reservation?)")
            return
        letter_id, sequence = str(letter["dead_letter_id"]), int(letter["sequence"])
        conn = await asyncpg.connect(self.dsn)
        try:
            await repair(conn, workflow_id)
        finally:
            await conn.close()
        by_redrive = self.rng.random() < RESUME_BY_REDRIVE_SHARE
        # While it waits: the retry resumes it. Refused only when it no longer waits (a cancel came
        # first) or is not parked yet (the letter shows before the workflow's decision): then again.
        deadline = time.monotonic() + ACT_TIMEOUT_S
        while time.monotonic() < deadline:
            if by_redrive:
                selection = {"ids": [letter_id], "status": await self._letter_status(letter_id)}
                staged = (await self.redrive(selection, phase="waiting")).status_code == 200
                resumed = staged and await self._redrive_answer(letter_id) == "redriven"
            else:
                resumed = await self.retry(workflow_id, sequence, phase="waiting") == 200
            if resumed or await self._status(workflow_id) in CLOSED:
                break
            await asyncio.sleep(2.0)
        closed = await self._until_closed(workflow_id)
        # After it closed: the step is done or compensated; both doors must refuse with the reason.
        await self.retry(workflow_id, sequence, phase=f"after it {closed}")
        selection = {"ids": [letter_id], "status": await self._letter_status(letter_id)}
        await self.redrive(selection, phase=f"after it {closed}", dry_run=True)
        await self.redrive(selection, phase=f"after it {closed}")

    async def bulk(self) -> None:
        """Bulk redrives by reason, each previewed first: workflows' letters are left out of both."""
        for reason in (PARKED_REASON, POISON_REASON):
            await self.redrive({"reason": reason}, phase=f"bulk {reason}", dry_run=True)
            await self.redrive({"reason": reason}, phase=f"bulk {reason}")


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if not isinstance(body, dict):
        return str(body)[:200]
    keys = ("status", "reason", "detail", "would_touch", "left_out", "owners", "refused", "summary")
    return str({k: body[k] for k in keys if body.get(k) not in (None, "", {})})[:300]
