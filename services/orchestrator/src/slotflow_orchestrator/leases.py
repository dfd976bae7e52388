"""Shard leases: Kafka's group assignment says who should decide for a shard, the lease row says
who may, and its lease token refuses everyone else's decisions.

A shard is a partition of slotflow.workflows.commands.v1 (a workflow belongs to the partition its
id hashes to). When the group assigns this orchestrator a partition it acquires the shard's lease,
raising the token by one whoever held it before; when the partition goes away it drops the lease.
A zombie (paused, partitioned from the group) still believing it owns a shard is refused at its
next decision: the token it carries is no longer the row's (`deciding.LEASE_CHECK`).

After a refusal the shard is not taken back until the group rebalances again: the zombie's
consumer has not yet learnt that the group moved on, and taking the lease back would only refuse the
rightful owner's decisions in turn.

"Rebalances" is counted, not inferred from the partitions: between two checks a shard can be taken
away and handed back (A, B, A), and the lease then moved to the other orchestrator and was released
by it. Comparing partition sets sees no change, keeps the refused shard out (or the stale token in)
and nobody decides for the shard's workflows again. So every new assignment the group hands this
member re-acquires every assigned shard: the token it held may be any older one.
"""

import logging

from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow_orchestrator.sql import (
    ACQUIRE,
    OPEN_IN_SHARD,
    RELEASE,
)

log = logging.getLogger(__name__)


class Leases:
    """The shards one orchestrator holds, with their lease tokens."""

    def __init__(self, pool: Pool, *, schema: str, owner: str) -> None:
        self._pool = pool
        self._schema = schema
        self._owner = owner
        self.held: dict[int, int] = {}
        self._lost: set[int] = set()
        #: Held shards whose token predates the latest assignment: acquired again.
        self._stale: set[int] = set()
        self._generation: int | None = None

    async def reconcile(self, assigned: frozenset[int], generation: int) -> list[int]:
        """Hold exactly the ``assigned`` shards of the group's assignment number ``generation``
        (`Consumer.assignments`); returns the shards (re)acquired."""
        if generation != self._generation:
            self._lost.clear()
            self._stale = set(self.held)
            self._generation = generation
        for shard in sorted(set(self.held) - assigned):
            await self.release(shard)
        acquired: list[int] = []
        for shard in sorted((assigned - set(self.held) - self._lost) | (self._stale & assigned)):
            token = await self._pool.fetchval(sql(ACQUIRE, self._schema), shard, self._owner)
            self.held[shard] = int(token)
            self._stale.discard(shard)
            acquired.append(shard)
            log.info("%s: acquired shard %d with lease token %d", self._owner, shard, token)
        return acquired

    def lost(self, shard: int, token: int) -> None:
        """A decision under ``token`` was refused: another orchestrator holds ``shard`` now (unless
        this one has acquired it again since, with a newer token)."""
        if self.held.get(shard) != token:
            return
        del self.held[shard]
        log.warning("%s: shard %d was taken over; no longer deciding for it", self._owner, shard)
        self._lost.add(shard)

    async def release(self, shard: int) -> None:
        self._stale.discard(shard)
        token = self.held.pop(shard, None)
        if token is not None:
            await self._pool.execute(sql(RELEASE, self._schema), shard, self._owner, token)
            log.info("%s: released shard %d", self._owner, shard)

    async def stuck_workflows(self, shard: int) -> list[str]:
        """Workflows of ``shard`` stuck on non-determinism: re-decided after an acquisition, so a
        deploy with code that matches their history lets them go on."""
        rows = await self._pool.fetch(sql(OPEN_IN_SHARD, self._schema), shard)
        return [r["workflow_id"] for r in rows]
