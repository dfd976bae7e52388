"""Which offset may be committed per partition while runs are admitted out of order.

Kafka commits one number per partition: "everything below this is done". With many records in
flight, a later record can become durable before an earlier one; committing its offset would
tell a successor after a crash that the earlier one was done too, and it would be lost. So the
committable offset is one past the highest *contiguous* durable offset.
"""

from collections.abc import Iterable

Partition = tuple[str, int]


class OffsetTracker:
    """Offsets seen and offsets durable, per partition (pure: no I/O)."""

    def __init__(self) -> None:
        self._pending: dict[Partition, set[int]] = {}
        self._high: dict[Partition, int] = {}
        self._committed: dict[Partition, int] = {}

    def seen(self, partition: Partition, offset: int) -> None:
        """``offset`` was handed to the claimer and is not durable yet."""
        self._pending.setdefault(partition, set()).add(offset)
        self._high[partition] = max(self._high.get(partition, -1), offset)

    def durable(self, partition: Partition, offset: int) -> None:
        """The work of ``offset`` survives a crash (claimed and started, skipped, or parked)."""
        pending = self._pending.get(partition)
        if pending is not None:
            pending.discard(offset)

    def committable(self) -> dict[Partition, int]:
        """Next offset to commit per partition, only where it moved since `committed` was told."""
        result: dict[Partition, int] = {}
        for partition, high in self._high.items():
            pending = self._pending.get(partition)
            upto = min(pending) if pending else high + 1
            if upto > self._committed.get(partition, -1):
                result[partition] = upto
        return result

    def committed(self, offsets: dict[Partition, int]) -> None:
        for partition, offset in offsets.items():
            self._committed[partition] = max(self._committed.get(partition, -1), offset)

    def forget(self, keep: Iterable[Partition]) -> None:
        """Drop partitions no longer assigned (after a rebalance their records belong to another)."""
        kept = set(keep)
        for table in (self._pending, self._high, self._committed):
            for partition in [p for p in table if p not in kept]:
                del table[partition]

    def in_flight(self) -> int:
        return sum(len(p) for p in self._pending.values())
