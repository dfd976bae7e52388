"""The claimer's JobDue consumer: poll as the executor has room, admit, start; commit offsets.

An offset is committed only once its record is durable (claimed, skipped, buffered or parked in
one transaction; see intake.py), so a crash redelivers exactly what was not yet admitted.
"""

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable

from slotflow.errors import KafkaAccessDenied
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.records import Record
from slotflow.service import sleep_or_stop
from slotflow_claimer.executor import Executor
from slotflow_claimer.intake import Intake
from slotflow_claimer.offsets import OffsetTracker
from slotflow_claimer.retrying import retry_unless_stopped, storage_pause

log = logging.getLogger(__name__)

#: Most records admitted in one transaction.
MAX_BATCH = 500
#: Poll at least this often even with no room (aiokafka's max_poll_interval is 300 s).
POLL_KEEPALIVE_SECONDS = 30.0


class Polling:
    """The intake and commit loops of one claimer, over its JobDue consumer."""

    def __init__(
        self,
        consumer: Consumer,
        *,
        intake: Intake,
        executor: Executor,
        wake_relay: Callable[[], None],
        owner: str,
        poll_timeout_ms: int,
        commit_interval: float,
    ) -> None:
        self._consumer = consumer
        self._intake = intake
        self._executor = executor
        self._wake_relay = wake_relay
        self._owner = owner
        self._poll_timeout_ms = poll_timeout_ms
        self._commit_interval = commit_interval
        self._tracker = OffsetTracker()

    async def intake_loop(self, stop: asyncio.Event) -> None:
        """Poll JobDue as the executor has room, admit each batch, start its claimed runs."""
        failures = 0
        held: list[Record] = []
        last_poll = time.monotonic()
        while not stop.is_set():
            free = await self._executor.wait_for_space(timeout=0.2)
            if stop.is_set():
                break
            if free == 0:
                # Full of long runs: aiokafka leaves the group when it is not polled for
                # max_poll_interval, so poll now and then and hold what arrives (not admitted,
                # so not durable, so never committed before it is).
                if time.monotonic() - last_poll > POLL_KEEPALIVE_SECONDS and len(held) < MAX_BATCH:
                    with contextlib.suppress(Exception):
                        held.extend(await self._consumer.poll(timeout_ms=0, max_records=1))
                    last_poll = time.monotonic()
                continue
            if held:
                records, held = held[: min(free, MAX_BATCH)], held[min(free, MAX_BATCH) :]
            else:
                try:
                    records = await self._consumer.poll(
                        timeout_ms=self._poll_timeout_ms, max_records=min(free, MAX_BATCH)
                    )
                except KafkaAccessDenied:
                    raise  # a missing ACL never heals by polling again: the service stops and says why
                except Exception as err:  # noqa: BLE001 - aiokafka's own error types; the broker may be away
                    failures += 1
                    log.warning("claimer %s: poll failed (try %d): %r", self._owner, failures, err)
                    await storage_pause(failures)
                    continue
                last_poll = time.monotonic()
                failures = 0
            if not records:
                continue
            for record in records:
                self._tracker.seen((record.topic, record.partition), record.offset)
            try:
                admission = await retry_unless_stopped(
                    functools.partial(self._intake.admit, records),
                    what="admit JobDue batch",
                    stop=stop,
                )
            except Exception as err:  # noqa: BLE001 - one refused record must not stop its partition
                log.warning(
                    "claimer %s: batch refused (%r); admitting its records one by one", self._owner, err
                )
                admission = await retry_unless_stopped(
                    functools.partial(self._intake.admit_each, records),
                    what="admit JobDue records",
                    stop=stop,
                )
            if admission is None:
                return  # stopping while storage is away: the records stay uncommitted
            for record in records:
                self._tracker.durable((record.topic, record.partition), record.offset)
            self._wake_relay()
            self._executor.start_all(admission.claimed)

    async def commit_loop(self, stop: asyncio.Event) -> None:
        """Commit durable offsets every commit interval, and once more at the stop."""
        interval = max(self._commit_interval, 0.02)
        while True:
            stopping = await sleep_or_stop(stop, interval)
            await self.commit_offsets()
            if stopping:
                return

    async def commit_offsets(self) -> dict[tuple[str, int], int]:
        """Commit the highest contiguous durable offset per partition; returns what was committed.

        Nothing while the group rebalances (see `Consumer.rebalancing`): the offsets stay tracked
        and go with the first commit after the assignment, under the new generation.
        """
        if self._consumer.rebalancing:
            return {}
        offsets = self._tracker.committable()
        if not offsets:
            return {}
        try:
            await self._consumer.commit_offsets(offsets)
        except Exception as err:  # noqa: BLE001 - a rebalance or a broker hiccup; the next pass retries
            log.warning("claimer %s: offset commit failed: %r", self._owner, err)
            self._tracker.forget(self._consumer.assignment())
            return {}
        self._tracker.committed(offsets)
        return offsets
