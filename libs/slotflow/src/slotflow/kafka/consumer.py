"""A consumer with manual commits: offsets move only after the work they cover is durable."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from slotflow.errors import KafkaAccessDenied
from slotflow.kafka.access import AUTHORIZATION_ERRORS, access_denied, start_failure
from slotflow.kafka.lag import ConsumerLag
from slotflow.kafka.records import Record
from slotflow.kafka.startup import wait_for_kafka
from slotflow.settings import KafkaSettings


class _Membership(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    """Counts the assignments the group handed this member (one per rebalance it took part in) and
    knows whether one is under way (from the revocation to the next assignment)."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self.assignments = 0
        self.rebalancing = False
        self._on_change = on_change

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.rebalancing = True
        self._on_change()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.assignments += 1
        self.rebalancing = False
        self._on_change()


class Consumer:
    """A started aiokafka consumer in a group, read_committed, auto-commit off."""

    def __init__(
        self,
        settings: KafkaSettings,
        *topics: str,
        group_id: str,
        client_id: str,
        auto_offset_reset: Literal["earliest", "latest"] = "earliest",
        max_poll_records: int = 500,
        isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed",
        max_partition_fetch_bytes: int | None = None,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        lag: ConsumerLag | None = None,
    ) -> None:
        self.group_id = group_id
        self._isolation_level = isolation_level
        #: Where `poll` reports this member's lag (`slotflow.kafka.lag`); None: not measured.
        self._lag = lag
        self._lag_sampled_at = float("-inf")
        #: Per partition since it was last assigned: the next offset this member committed, or
        #: before its first commit the offset of the first record it handed out (the group's).
        self._committed: dict[tuple[str, int], int] = {}
        self._max_poll_records = max_poll_records
        self._settings = settings
        self._what = f"Kafka consumer {client_id} (group {group_id})"
        options: dict[str, Any] = {
            **settings.client_options(),
            "client_id": f"{settings.client_id_prefix}-{client_id}",
            "group_id": group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": auto_offset_reset,
            "isolation_level": isolation_level,
            "max_poll_records": max_poll_records,
            # Oversize records still reach us whole, so they can be dead-lettered, not skipped.
            "max_partition_fetch_bytes": max_partition_fetch_bytes or settings.max_message_bytes * 4,
            # How long a dead member keeps its partitions (aiokafka's defaults unless told).
            "session_timeout_ms": session_timeout_ms,
            "heartbeat_interval_ms": heartbeat_interval_ms,
        }
        self._membership = _Membership(self._committed.clear)
        self._topics = list(topics)

        def make() -> Any:
            consumer = AIOKafkaConsumer(**options)
            if self._topics:
                consumer.subscribe(self._topics, listener=self._membership)
            return consumer

        # aiokafka's consumer cannot be started twice (a start that failed half-way leaves its
        # fetcher behind): a start that fails replaces it, so the caller may try again.
        self._make = make
        self._consumer: Any = make()

    async def start(self) -> None:
        """Start consuming; after a failure (the broker not up yet) it may be called again.

        Raises:
            TransientStorageError, KafkaAuthenticationFailed, KafkaAccessDenied: as
                `slotflow.kafka.access.start_failure` names the failure.
        """
        try:
            await wait_for_kafka(self._settings, self._what)
        except BaseException:
            await self._replace()
            raise
        try:
            await self._consumer.start()
        except KafkaError as err:
            await self._replace()
            raise await start_failure(
                self._settings.bootstrap, self._settings.security, err, self._what
            ) from err
        except BaseException:
            await self._replace()
            raise

    async def _replace(self) -> None:
        """Stop the client that failed to start and put a fresh one in its place."""
        try:
            await self._consumer.stop()
        finally:
            self._consumer = self._make()

    async def stop(self) -> None:
        if self._lag is not None:
            self._lag.forget(self)  # its partitions are someone else's to report now
        await self._consumer.stop()

    async def __aenter__(self) -> "Consumer":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def poll(self, *, timeout_ms: int = 1000, max_records: int | None = None) -> list[Record]:
        """The next batch, partitions interleaved, each partition's records in offset order.

        aiokafka hands out what it has buffered one partition after another, so a backlog on one
        partition filled whole batches while every other partition's records waited behind it (a
        new orchestrator owning six shards took in the first five shards' backlog before it could
        decide anything for the sixth). Here every partition with buffered records gets an even
        share of the batch first; what is left of it is filled from whatever is buffered.
        """
        limit = max_records or self._max_poll_records
        partitions = sorted(self._consumer.assignment())
        share = max(1, limit // max(1, len(partitions)))
        taken: dict[Any, list[Any]] = {}
        count = 0

        def add(batches: Mapping[Any, Sequence[Any]]) -> None:
            nonlocal count
            for tp, records in batches.items():
                taken.setdefault(tp, []).extend(records)
                count += len(records)

        try:
            add(await self._consumer.getmany(timeout_ms=timeout_ms, max_records=share))
        except AUTHORIZATION_ERRORS as err:
            # A missing ACL never heals by polling again: the service stops with the reason.
            denied = access_denied(err, self._settings.security, self._what)
            raise (denied or KafkaAccessDenied(str(err))) from err
        if count:  # something is buffered: take the other partitions' shares without waiting
            for tp in partitions:
                if count >= limit:
                    break
                if tp not in taken:
                    add(await self._consumer.getmany(tp, timeout_ms=0, max_records=min(share, limit - count)))
            if count < limit:
                add(await self._consumer.getmany(timeout_ms=0, max_records=limit - count))
        if self._lag is not None:
            for tp, records in taken.items():
                # The first record handed out since the assignment is where the group had
                # committed: the lag counts from there until this member commits itself.
                if records:
                    self._committed.setdefault((tp.topic, tp.partition), records[0].offset)
            if self._lag.clock() - self._lag_sampled_at >= self._lag.interval:
                self._lag_sampled_at = self._lag.clock()
                self._lag.record(self, self.group_id, self.lag())
        return [Record.from_aiokafka(r) for records in taken.values() for r in records]

    async def commit(self, records: Sequence[Record]) -> None:
        """Commit past the highest offset of each partition in ``records``."""
        if records:
            await self.commit_offsets(next_offsets(records))

    async def commit_offsets(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit explicit next-offsets per (topic, partition)."""
        await self._consumer.commit(
            {TopicPartition(t, p): OffsetAndMetadata(o, "") for (t, p), o in offsets.items()}
        )
        self._committed.update(offsets)

    def lag(self) -> dict[tuple[str, int], int]:
        """Records behind per assigned partition whose end a fetch has reported: the end (the last
        stable offset for a read_committed member) minus the offset this member committed (before
        its first commit: the first offset it handed out, or its position when it handed out
        none, both the group's committed offset). From aiokafka's fetch state and what this member
        did itself: no broker round trip."""
        # aiokafka keeps each partition's fetch state (high watermark, LSO, position) here.
        subscription = self._consumer._subscription
        assignment = subscription.subscription.assignment if subscription.subscription else None
        if assignment is None:
            return {}
        behind: dict[tuple[str, int], int] = {}
        for tp in self._consumer.assignment():
            state = assignment.state_value(tp)
            if state is None:
                continue
            end = state.highwater
            if self._isolation_level == "read_committed" and state.lso is not None and state.lso >= 0:
                end = state.lso
            if end is None:
                continue  # not fetched yet: its end is unknown
            key = (tp.topic, tp.partition)
            done = self._committed.get(key)
            if done is None:
                if not state.has_valid_position:
                    continue
                done = state.position
            behind[key] = max(0, end - done)
        return behind

    def assignment(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self._consumer.assignment()}

    @property
    def assignments(self) -> int:
        """How many assignments this member has received so far. Two reads of `assignment()` that
        agree may still straddle rebalances (a partition taken away and handed back in between);
        a changed count says one happened, whatever the partitions look like."""
        return self._membership.assignments

    @property
    def rebalancing(self) -> bool:
        """Between this member's revocation and its next assignment. Commit nothing then: the
        request queues behind the member's JoinGroup, reaches the broker under the old generation
        and is refused, and aiokafka answers that by joining again, which starts the next
        rebalance (reliability bug 3: a claimer committing every 0.2 s rebalanced for minutes)."""
        return self._membership.rebalancing


def next_offsets(records: Sequence[Record]) -> dict[tuple[str, int], int]:
    """The offset to commit per partition: one past the highest record seen."""
    offsets: dict[tuple[str, int], int] = {}
    for record in records:
        key = (record.topic, record.partition)
        offsets[key] = max(offsets.get(key, 0), record.offset + 1)
    return offsets
