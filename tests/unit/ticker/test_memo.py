"""IdentityMemo: one computation per (owner object, key), equal owners kept apart, bounded size."""

from slotflow_ticker.memo import IdentityMemo


class Owner:
    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Owner) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def test_each_owner_and_key_is_computed_once() -> None:
    calls: list[tuple[str, int]] = []

    def compute(owner: Owner, key: int) -> str:
        calls.append((owner.name, key))
        return f"{owner.name}:{key}"

    memo: IdentityMemo[Owner, int, str] = IdentityMemo(compute, limit=100)
    a = Owner("a")
    assert [memo.get(a, 1), memo.get(a, 1), memo.get(a, 2)] == ["a:1", "a:1", "a:2"]
    assert calls == [("a", 1), ("a", 2)]
    # An equal but distinct owner is another object: identity, not equality, is the key.
    twin = Owner("a")
    assert memo.get(twin, 1) == "a:1"
    assert calls == [("a", 1), ("a", 2), ("a", 1)]


def test_a_full_memo_starts_over_and_still_answers() -> None:
    calls: list[int] = []

    def compute(owner: Owner, key: int) -> int:
        calls.append(key)
        return key * 2

    memo: IdentityMemo[Owner, int, int] = IdentityMemo(compute, limit=3)
    owner = Owner("o")
    assert [memo.get(owner, k) for k in range(5)] == [0, 2, 4, 6, 8]
    assert memo.get(owner, 4) == 8
    assert memo.get(owner, 0) == 0
    assert calls == [0, 1, 2, 3, 4, 0]
