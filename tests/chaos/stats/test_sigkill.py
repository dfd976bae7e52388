"""SIGKILL the stats processor mid-stream: its tables come back from the changelog topics, and no
count is lost or doubled (events whose effect reached the changelog before their offsets were
committed are delivered again and recognised by the per-window offsets)."""

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.api.stats_support import StatsProcess, past_minute, stored_counts, workload


async def _total(dsn: str) -> int:
    return sum((await stored_counts(dsn)).values())


# Three worker starts (each joins a group and recovers its tables) on a shared 2-core box.
@pytest.mark.timeout(900)
async def test_sigkill_mid_stream_loses_and_doubles_nothing(
    kafka: KafkaSettings, pg_dsn: str, tmp_path: Path
) -> None:
    # 100 runs 10 s apart: 17 minutes of windows, all younger than the 2 h expiry. The kill must
    # come mid-stream: after some counts reached the sink, before all of them. On a fast box the
    # worker counted all 1,206 events of one burst before a poll could see the first (the test
    # failed as "not mid-stream"), so the stream comes in two parts (25 runs, then 75 from the
    # fifth minute on) and the kill falls between them.
    base = past_minute(60)
    head = workload(base, runs_per_schedule=25)
    tail = workload(base + timedelta(minutes=5), runs_per_schedule=75)
    # Slots 5 s later: other run ids (the identity rule ties them to the slot), the same windows.
    second = workload(base + timedelta(seconds=5), runs_per_schedule=100)

    worker = StatsProcess(kafka, pg_dsn, tmp_path, name="w1")
    try:
        async with Producer(kafka, client_id="stats-chaos") as producer:
            await producer.send_many(head.topics(kafka))

            async def some_progress() -> bool:
                assert worker.alive(), worker.log()
                return await _total(pg_dsn) > 0

            await assert_eventually(some_progress, timeout=120, interval=0.05, message="first copies")
            worker.kill()

            worker = StatsProcess(kafka, pg_dsn, tmp_path, name="w2")

            async def exactly(expected: Counter[tuple[str, str, datetime, str]]) -> bool:
                assert worker.alive(), worker.log()
                found = Counter(await stored_counts(pg_dsn))
                if found != expected:
                    wrong = sorted(
                        (k, found[k], expected[k])
                        for k in found.keys() | expected.keys()
                        if found[k] != expected[k]
                    )
                    raise AssertionError(f"{len(wrong)} counters differ (key, stored, expected): {wrong[:6]}")
                return True

            await assert_eventually(
                lambda: exactly(head.expected), timeout=300, interval=0.5, message="exact after kill"
            )
            # The rest of the stream, to the recovered worker.
            first = head.expected + tail.expected
            await producer.send_many(tail.topics(kafka))
            await assert_eventually(
                lambda: exactly(first), timeout=300, interval=0.5, message="exact after the rest"
            )

            # Idle kill and restart, then more events into the same windows: they add to the counts
            # recovered from the changelog (a table rebuilt empty would write smaller values, which
            # the sink refuses, and the totals would never match).
            worker.kill()
            worker = StatsProcess(kafka, pg_dsn, tmp_path, name="w3")
            await producer.send_many(second.topics(kafka))
            both = first + second.expected
            await assert_eventually(
                lambda: exactly(both), timeout=300, interval=0.5, message="exact after restart"
            )
        log = (tmp_path / "w3.log").read_text(errors="replace")
        assert "Recovery" in log
    finally:
        worker.close()
