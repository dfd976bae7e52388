"""The fenced write helpers for user tables, against PostgreSQL: the highest token wins."""

import asyncio

import pytest

from slotflow.errors import FenceRejected
from slotflow.pg.fencing import FENCES_DDL, InvalidIdentifier, advance_fence, fenced_upsert
from slotflow.pg.pool import Pool


@pytest.fixture
async def ledger(pg_pool: Pool) -> Pool:
    await pg_pool.execute(
        "CREATE TABLE payouts (run_id text PRIMARY KEY, amount bigint NOT NULL, fence_token bigint NOT NULL)"
    )
    await pg_pool.execute(FENCES_DDL)
    return pg_pool


async def write(pool: Pool, token: int, amount: int = 100) -> None:
    async with pool.acquire() as conn:
        await fenced_upsert(
            conn, table="payouts", key={"run_id": "r1"}, values={"amount": amount}, token=token
        )


async def test_a_higher_token_overwrites_and_a_lower_one_is_refused(ledger: Pool) -> None:
    await write(ledger, 7, amount=100)
    await write(ledger, 8, amount=200)
    with pytest.raises(FenceRejected) as refused:
        await write(ledger, 7, amount=999)
    assert (refused.value.token, refused.value.current) == (7, 8)
    rows = await ledger.fetch("SELECT * FROM payouts")
    assert [(r["amount"], r["fence_token"]) for r in rows] == [(200, 8)]


async def test_the_same_token_may_repeat_its_own_write(ledger: Pool) -> None:
    await write(ledger, 3, amount=100)
    await write(ledger, 3, amount=100)
    assert await ledger.fetchval("SELECT count(*) FROM payouts") == 1


async def test_concurrent_writers_leave_the_highest_token(ledger: Pool) -> None:
    results = await asyncio.gather(
        *(write(ledger, token, amount=token) for token in range(1, 21)), return_exceptions=True
    )
    assert all(r is None or isinstance(r, FenceRejected) for r in results)
    row = await ledger.fetchrow("SELECT * FROM payouts")
    assert row is not None
    assert (row["fence_token"], row["amount"]) == (20, 20)


async def stale_transaction(pool: Pool) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await advance_fence(conn, "merchant:42", 4)
        await conn.execute("INSERT INTO payouts VALUES ('r4', 400, 4)")  # never reached


async def test_advance_fence_guards_a_whole_transaction(ledger: Pool) -> None:
    async with ledger.acquire() as conn, conn.transaction():
        await advance_fence(conn, "merchant:42", 5)
        await conn.execute("INSERT INTO payouts VALUES ('r5', 500, 5)")
    with pytest.raises(FenceRejected):
        await stale_transaction(ledger)
    assert [r["run_id"] for r in await ledger.fetch("SELECT run_id FROM payouts")] == ["r5"]
    assert (
        await ledger.fetchval("SELECT fence_token FROM slotflow_fences WHERE resource = 'merchant:42'") == 5
    )


async def test_names_are_validated_not_interpolated(ledger: Pool) -> None:
    async with ledger.acquire() as conn:
        with pytest.raises(InvalidIdentifier):
            await fenced_upsert(
                conn, table="payouts; DROP TABLE payouts", key={"run_id": "x"}, values={"amount": 1}, token=1
            )
        with pytest.raises(InvalidIdentifier):
            await fenced_upsert(conn, table="payouts", key={"run_id": "x"}, values={'amount"--': 1}, token=1)
    assert await ledger.fetchval("SELECT count(*) FROM payouts") == 0
