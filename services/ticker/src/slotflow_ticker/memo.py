"""Values derived from a parsed definition, cached by the definition's identity.

Parsed definitions are shared objects (`store.parse_definition` returns one per distinct stored
text), so identity is a good key, and it spares hashing a pydantic model on the claim's hot path.
Each entry keeps its owner alive, so the owner's id cannot be reused while the entry is cached.
"""

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Owner = TypeVar("Owner")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class IdentityMemo(Generic[Owner, K, V]):
    """``compute(owner, key)`` memoised per (owner identity, key); cleared whole when full."""

    def __init__(self, compute: Callable[[Owner, K], V], *, limit: int) -> None:
        self._compute = compute
        self._limit = limit
        self._entries: dict[tuple[int, K], tuple[Owner, V]] = {}

    def get(self, owner: Owner, key: K) -> V:
        slot = (id(owner), key)
        hit = self._entries.get(slot)
        if hit is not None and hit[0] is owner:
            return hit[1]
        value = self._compute(owner, key)
        if len(self._entries) >= self._limit:
            self._entries.clear()
        self._entries[slot] = (owner, value)
        return value
