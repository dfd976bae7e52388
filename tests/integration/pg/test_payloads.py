"""The PostgreSQL payload store: content-addressed, idempotent, safe under concurrent puts."""

import asyncio
import hashlib
import os

import asyncpg
import pytest

from slotflow.contracts import ActivityCompleted
from slotflow.contracts.workflows import is_payload_ref
from slotflow.errors import ConfigurationError, SlotflowError
from slotflow.pg.migrations import PAYLOADS, apply_migrations
from slotflow.pg.payloads import PayloadNotFound, PostgresPayloadStore, get_payload, put_payload
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow.testing import assert_eventually
from slotflow.workflow.payloads import PayloadStore, offload_payloads, resolve_payloads

SCHEMA = "payloads_test"
FIVE_MB = 5 * 1024 * 1024


@pytest.fixture
async def store(pg_pool: Pool) -> PostgresPayloadStore:
    assert await apply_migrations(pg_pool, schema=SCHEMA, sources=[PAYLOADS]) == ["payloads/0001_payloads"]
    return PostgresPayloadStore(pg_pool, schema=SCHEMA)


async def rows(pool: Pool) -> int:
    count: int = await pool.fetchval(sql("SELECT count(*) FROM {schema}.payloads", SCHEMA))
    return count


async def test_a_5_mb_payload_round_trips_under_its_sha256(
    store: PostgresPayloadStore, pg_pool: Pool
) -> None:
    data = os.urandom(FIVE_MB)  # incompressible: the bytes really travel and are really stored

    ref = await store.put(data)

    assert ref == "sha256:" + hashlib.sha256(data).hexdigest()
    assert await store.get(ref) == data
    assert (
        await pg_pool.fetchval(sql("SELECT size FROM {schema}.payloads WHERE ref = $1", SCHEMA), ref)
        == FIVE_MB
    )


async def test_the_same_bytes_stored_twice_are_one_row(store: PostgresPayloadStore, pg_pool: Pool) -> None:
    data = b'{"order": 1042, "lines": []}' * 4096

    first = await store.put(data)
    second = await store.put(bytes(data))

    assert first == second
    assert await rows(pg_pool) == 1
    other = await store.put(data + b" ")
    assert other != first
    assert await rows(pg_pool) == 2


async def test_concurrent_puts_of_the_same_content_do_not_conflict(
    store: PostgresPayloadStore, pg_pool: Pool
) -> None:
    data = os.urandom(256 * 1024)

    # More writers than the pool's 8 connections: some wait on the pool, several race on the key.
    refs = await asyncio.gather(*(store.put(data) for _ in range(12)))

    assert set(refs) == {"sha256:" + hashlib.sha256(data).hexdigest()}
    assert await rows(pg_pool) == 1
    assert await store.get(refs[0]) == data


async def test_two_transactions_putting_the_same_bytes_both_commit(
    store: PostgresPayloadStore, pg_pool: Pool
) -> None:
    # The interleaving a gather may not produce: A inserts, B inserts before A commits (B waits on
    # the key), A commits, B's insert turns into nothing and B commits too.
    data = b"x" * 70_000
    async with pg_pool.acquire() as a, pg_pool.acquire() as b:
        ta, tb = a.transaction(), b.transaction()
        await ta.start()
        await tb.start()
        ref_a = await put_payload(a, schema=SCHEMA, data=data)
        b_put = asyncio.ensure_future(put_payload(b, schema=SCHEMA, data=data))

        async def b_waits_on_a() -> bool:
            waiting = await pg_pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            return bool(waiting)

        await assert_eventually(b_waits_on_a, timeout=10)
        await ta.commit()
        ref_b = await b_put
        await tb.commit()

    assert ref_a == ref_b
    assert await rows(pg_pool) == 1


async def test_an_unknown_or_malformed_ref_is_payload_not_found(store: PostgresPayloadStore) -> None:
    missing = "sha256:" + "0" * 64
    with pytest.raises(PayloadNotFound, match=f"no payload {missing}"):
        await store.get(missing)
    with pytest.raises(PayloadNotFound, match="is not a payload reference"):
        await store.get("md5:abc")
    assert issubclass(PayloadNotFound, SlotflowError)


async def test_the_table_refuses_bytes_that_do_not_match_their_ref(
    store: PostgresPayloadStore, pg_pool: Pool
) -> None:
    ref = await store.put(b"original")

    with pytest.raises(asyncpg.CheckViolationError, match="payloads_ref_is_digest"):
        await pg_pool.execute(
            sql("INSERT INTO {schema}.payloads (ref, data, size) VALUES ($1, $2, 8)", SCHEMA),
            "sha256:" + "1" * 64,
            b"tampered",
        )
    async with pg_pool.acquire() as conn:
        assert await get_payload(conn, schema=SCHEMA, ref=ref) == b"original"


async def test_an_empty_payload_is_a_payload(store: PostgresPayloadStore) -> None:
    ref = await store.put(b"")

    assert ref == "sha256:" + hashlib.sha256(b"").hexdigest()
    assert await store.get(ref) == b""


def test_a_bad_schema_name_is_refused(pg_pool: Pool) -> None:
    with pytest.raises(ConfigurationError, match="invalid schema name"):
        PostgresPayloadStore(pg_pool, schema="x; DROP TABLE y")


async def test_a_5_mb_activity_result_travels_by_reference_through_the_store(
    store: PostgresPayloadStore, pg_pool: Pool
) -> None:
    # The SDK's helpers around the decision step, with this store as their PayloadStore.
    as_protocol: PayloadStore = store
    result = {"report": "x" * FIVE_MB}
    completed = ActivityCompleted(workflow_id="order-1", sequence=3, scheduled_sequence=2, result=result)

    (offloaded,) = await offload_payloads([completed], as_protocol)
    (resolved,) = await resolve_payloads([offloaded], as_protocol)

    assert isinstance(offloaded, ActivityCompleted)
    assert is_payload_ref(offloaded.result)
    assert len(offloaded.model_dump_json()) < 200  # the event on the topic is small
    assert resolved == completed
    assert await rows(pg_pool) == 1
