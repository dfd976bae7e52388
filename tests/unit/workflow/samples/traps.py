"""Workflow code with every trap the static check knows; each trap line says what it expects.

Never imported or run: `slotflow workflow check` reads it. `# expect: CODE` marks the line a finding
must point at (the check's tests compare the two).
"""

import asyncio
import datetime as dt
import os
import random
import socket
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from random import choice
from time import monotonic as host_monotonic

import aiohttp  # type: ignore[import-not-found]  # never installed: the checker reads, never imports
import aiokafka
import asyncpg
import httpx
import requests

from slotflow import workflow


def fmt_deadline() -> str:
    """A helper the workflow calls: its trap counts as the workflow's."""
    return (datetime.now(UTC) + timedelta(days=1)).isoformat()  # expect: SFW001


def unused_helper() -> float:
    """Not called from workflow code: not checked."""
    return time.time()


@workflow.defn(name="samples.traps")
class Traps:
    @workflow.run
    async def run(self, order: dict[str, str]) -> None:
        started = datetime.now(UTC)  # expect: SFW001
        today = dt.date.today()  # expect: SFW001  # noqa: DTZ011
        utc = datetime.utcnow()  # expect: SFW001  # noqa: DTZ003
        stamp = time.time()  # expect: SFW001
        tick = host_monotonic()  # expect: SFW001
        clock = datetime.now  # expect: SFW001
        deadline = fmt_deadline()
        await asyncio.sleep(1)  # expect: SFW002
        time.sleep(1)  # expect: SFW002
        await asyncio.wait_for(self.step(), 5)  # expect: SFW002
        jitter = random.random()  # expect: SFW003
        pick = choice(["a", "b"])  # expect: SFW003
        token = uuid.uuid4()  # expect: SFW004
        old_token = uuid.uuid1()  # expect: SFW004
        region = os.environ["REGION"]  # expect: SFW005
        debug = os.getenv("DEBUG")  # expect: SFW005
        with open("orders.csv") as f:  # expect: SFW006
            f.read()
        Path("state.json").write_text("{}")  # expect: SFW006
        sock = socket.create_connection(("db", 5432))  # expect: SFW006
        requests.post("https://pay.example/charge", timeout=5)  # expect: SFW006
        async with httpx.AsyncClient() as client:  # expect: SFW006
            await client.get("https://pay.example")
        async with aiohttp.ClientSession() as session:  # expect: SFW006
            await session.get("https://pay.example")
        conn = await asyncpg.connect("postgresql://db")  # expect: SFW006
        producer = aiokafka.AIOKafkaProducer()  # expect: SFW006
        subprocess.run(["ls"], check=True)  # expect: SFW007
        task = asyncio.create_task(self.step())  # expect: SFW008
        loop = asyncio.get_running_loop()  # expect: SFW008
        await asyncio.gather(self.step(), task)  # expect: SFW008
        ready = asyncio.Event()  # expect: SFW008
        worker = threading.Thread(target=print)  # expect: SFW009
        with ThreadPoolExecutor() as pool:  # expect: SFW009
            pool.submit(print)
        self.seen = (started, today, utc, stamp, tick, clock, deadline, jitter, pick, token, old_token)
        self.held = (region, debug, sock, conn, producer, loop, worker, ready)

    async def step(self) -> None:
        """Methods other than `run` are workflow code too (signal handlers, queries, steps)."""
        await asyncio.sleep(0)  # expect: SFW002

    async def suppressed(self) -> float:
        return time.time()  # workflow-check: ignore (the sample shows the escape hatch)


class NotAWorkflow:
    """An ordinary class in the same module: free to use the host."""

    def now(self) -> datetime:
        return datetime.now(UTC)
