"""The `decider` loop of an orchestrator process: which workflows to decide, and when.

It holds the leases of the command-topic partitions the group assigned to this process (checked
every `lease_check_seconds`), takes the workflows of those shards with waiting inputs, oldest input
first, and decides them through `deciding.Decisions`, several to a transaction. Stuck workflows of
a newly acquired shard are decided again, so a deploy that fixes their code lets them go on. A
workflow whose decision failed (not by a lost lease) waits, doubling, before its next try.
"""

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Sequence

import asyncpg

from slotflow.contracts import NonDeterminismDetected
from slotflow.errors import SlotflowError
from slotflow.kafka.consumer import Consumer
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow.relay import OutboxRelay
from slotflow.service import sleep_or_stop
from slotflow_orchestrator.config import OrchestratorSettings
from slotflow_orchestrator.deciding import Decisions, LeaseLost, Outcome
from slotflow_orchestrator.intake import OUTAGES
from slotflow_orchestrator.leases import Leases
from slotflow_orchestrator.metrics import OrchestratorMetrics
from slotflow_orchestrator.sql import (
    PENDING,
)

log = logging.getLogger(__name__)

#: What a decider pass outlives (the database away, a lease row refused): it pauses and tries again.
RECOVERABLE: tuple[type[BaseException], ...] = (*OUTAGES, SlotflowError, asyncpg.PostgresError)
#: A workflow whose decision failed (not by a lease) waits this long, doubling, before the next try.
FAILURE_PAUSE = (0.2, 30.0)


class DeciderLoop:
    """The decider of one orchestrator process; `run` it under the supervisor."""

    def __init__(
        self,
        pool: Pool,
        cfg: OrchestratorSettings,
        *,
        owner: str,
        leases: Leases,
        decisions: Decisions,
        metrics: OrchestratorMetrics,
        consumer: Consumer,
        commands_topic: str,
        relay: OutboxRelay,
        wake: asyncio.Event,
    ) -> None:
        self.pool = pool
        self.owner = owner
        self.leases = leases
        self.decisions = decisions
        self.metrics = metrics
        self._cfg = cfg
        self._consumer = consumer
        self._commands_topic = commands_topic
        self._relay = relay
        #: Set by the intake when it recorded inputs for a shard this process holds.
        self._wake = wake
        self._failures: dict[str, tuple[int, float]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Decide until ``stop``: check the leases every `lease_check_seconds`, then take the
        workflows with waiting inputs (and the stuck ones of a newly held shard) a batch at a time."""
        cfg, leases, consumer = self._cfg, self.leases, self._consumer
        redecide: list[tuple[str, int]] = []
        next_check = 0.0
        failures = 0
        seen_assignments = -1
        while not stop.is_set():
            try:
                # A new assignment is acted on at once (a failover waits for nothing more); the
                # periodic check catches the rest.
                if time.monotonic() >= next_check or consumer.assignments != seen_assignments:
                    seen_assignments = consumer.assignments
                    assigned = frozenset(p for t, p in consumer.assignment() if t == self._commands_topic)
                    for shard in await leases.reconcile(assigned, consumer.assignments):
                        redecide.extend((wf, shard) for wf in await leases.stuck_workflows(shard))
                    self.metrics.shards_owned.set(len(leases.held))
                    next_check = time.monotonic() + cfg.lease_check_seconds
                work = await self._pending(list(leases.held), cfg.decide_batch)
                failures = 0
            except RECOVERABLE as err:
                failures += 1
                log.warning("orchestrator %s: decider pass failed (try %d): %r", self.owner, failures, err)
                await sleep_or_stop(stop, min(5.0, 0.1 * 2**failures))
                continue
            batch = [(wf, shard, False) for wf, shard in work] + [(wf, s, True) for wf, s in redecide]
            redecide = []
            if not batch:
                await sleep_or_stop(stop, cfg.idle_poll_seconds, wake=self._wake)
                self._wake.clear()
                continue
            await self._decide_all(batch, cfg.decide_concurrency)
            self._relay.wake()

    async def _pending(self, shards: Sequence[int], limit: int) -> list[tuple[str, int]]:
        if not shards:
            return []
        now = time.monotonic()
        per_shard = max(1, limit // len(shards))
        rows = await self.pool.fetch(sql(PENDING, self._cfg.db_schema), list(shards), per_shard)
        return [
            (r["workflow_id"], r["shard"])
            for r in rows
            if self._failures.get(r["workflow_id"], (0, 0.0))[1] <= now
        ]

    async def _decide_all(self, batch: list[tuple[str, int, bool]], concurrency: int) -> None:
        """Decide ``batch``: per shard, up to `decisions_per_transaction` workflows share one
        transaction; a chunk that fails (not by a lease) is decided again one workflow at a time,
        so one bad workflow never holds back the others."""
        gate = asyncio.Semaphore(concurrency)
        size = self._cfg.decisions_per_transaction
        chunks: list[tuple[list[str], int, bool]] = []
        by_key: dict[tuple[int, bool], list[str]] = {}
        for workflow_id, shard, redecide in batch:
            by_key.setdefault((shard, redecide), []).append(workflow_id)
        for (shard, redecide), ids in by_key.items():
            chunks.extend((ids[i : i + size], shard, redecide) for i in range(0, len(ids), size))

        async def one(ids: list[str], shard: int, redecide: bool) -> None:
            async with gate:
                await self._decide_chunk(ids, shard, redecide)

        await asyncio.gather(*(one(*chunk) for chunk in chunks))

    async def _decide_chunk(self, workflow_ids: list[str], shard: int, redecide: bool) -> None:
        leases, decisions = self.leases, self.decisions
        token = leases.held.get(shard)
        if token is None:
            return
        if len(workflow_ids) > 1:
            try:
                outcomes = await decisions.decide_many(
                    workflow_ids, shard=shard, token=token, redecide=redecide
                )
            except LeaseLost:
                self.metrics.leases_lost.inc()
                self.metrics.decisions.labels("lease_lost").inc(len(workflow_ids))
                leases.lost(shard, token)
                return
            except Exception as err:  # noqa: BLE001 - narrowed below, one workflow at a time
                log.warning(
                    "orchestrator %s: %d decisions together failed (%r); one at a time",
                    self.owner,
                    len(workflow_ids),
                    err,
                )
            else:
                for workflow_id in workflow_ids:
                    self._failures.pop(workflow_id, None)
                self._count(outcomes)
                return
        for workflow_id in workflow_ids:
            await self._decide_one(workflow_id, shard, redecide)

    async def _decide_one(self, workflow_id: str, shard: int, redecide: bool) -> None:
        leases, decisions = self.leases, self.decisions
        token = leases.held.get(shard)
        if token is None:
            return
        try:
            outcome = await decisions.decide(workflow_id, shard=shard, token=token, redecide=redecide)
        except LeaseLost:
            self.metrics.leases_lost.inc()
            self.metrics.decisions.labels("lease_lost").inc()
            leases.lost(shard, token)
            return
        except Exception as err:  # noqa: BLE001 - one workflow's failure must not stop the others
            tries = self._failures.get(workflow_id, (0, 0.0))[0] + 1
            pause = min(FAILURE_PAUSE[1], FAILURE_PAUSE[0] * 2 ** min(tries, 16))
            self._failures[workflow_id] = (tries, time.monotonic() + pause)
            self.metrics.decisions.labels("failed").inc()
            log.error(
                "orchestrator %s: decision for %s failed (try %d): %r", self.owner, workflow_id, tries, err
            )
            return
        self._failures.pop(workflow_id, None)
        self._count([outcome])

    def _count(self, outcomes: Sequence[Outcome]) -> None:
        """Count a transaction's decisions: summed first, one increment per label (a labelled
        increment costs a lookup and a lock; a workflow's decisions append about eight events)."""
        decisions: Counter[str] = Counter()
        events: Counter[str] = Counter()
        commands: Counter[tuple[str, str]] = Counter()
        diverged = 0
        refused: Counter[tuple[str, str]] = Counter()
        for outcome in outcomes:
            out = outcome.step
            for refusal in out.refused if out is not None else ():
                refused[(refusal.verdict.reason or "", refusal.verdict.rule or "")] += 1
                log.warning(
                    "orchestrator %s: parked %s %s in the DLQ: %s",
                    self.owner,
                    refusal.input.envelope.type,
                    refusal.input.envelope.id,
                    refusal.verdict.detail,
                )
            if out is None or not (out.events or out.acks):
                decisions["unchanged"] += 1
                continue
            for event in out.events:
                if isinstance(event, NonDeterminismDetected):
                    # The workflow is stuck from now on: say which and why, once per divergence.
                    log.warning(
                        "orchestrator %s: workflow %s is stuck: its replay diverged at history sequence %d "
                        "(the history recorded %s, the code did %s); nothing more is decided for it until "
                        "code that matches its history is deployed",
                        self.owner,
                        out.workflow_id,
                        event.at_sequence,
                        event.expected,
                        event.got,
                    )
            decisions["appended"] += 1
            events.update(event.message_type for event in out.events)
            commands.update(
                (ack.command_type, "accepted" if ack.reason is None else "rejected") for ack in out.acks
            )
            diverged += int(out.diverged)
        metrics = self.metrics
        for outcome_label, count in decisions.items():
            metrics.decisions.labels(outcome_label).inc(count)
        for event_type, count in events.items():
            metrics.history_events.labels(event_type).inc(count)
        for (command_type, answer), count in commands.items():
            metrics.commands.labels(command_type, answer).inc(count)
        if diverged:
            metrics.non_determinism.inc(diverged)
        for (reason, rule), count in refused.items():
            metrics.refused.labels(reason, rule).inc(count)
