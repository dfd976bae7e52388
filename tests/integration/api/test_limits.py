"""Request bodies are bounded before they are read: a real api process (uvicorn), its memory
watched from /proc while 300 MB and 10 MB bodies arrive, declared and chunked.

Before the bound, a 300 MB body took the api from 92 MB to a 1.26 GB peak (973 MB kept), and
10 MB answered 500 (the command was too large for Kafka); a command under the body limit that is
still too large for Kafka is a 413 too.
"""

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from slotflow.contracts.codec import FIELD_MAX_DEPTH
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.badinput import BadRequest, bad_requests
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import AUTH, TEST_TOKEN

REPO = Path(__file__).resolve().parents[3]
MIB = 1024 * 1024
#: The api's resident memory may grow by at most this much while refusing the bodies (it holds at
#: most the 1 MiB limit plus one chunk per request) and must be back under it afterwards.
RSS_BOUND = 64 * MIB


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class ApiProcess:
    def __init__(self, kafka: KafkaSettings, pg_dsn: str, log_path: Path) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTFLOW_")}
        env.update(
            {
                "SLOTFLOW_KAFKA_BOOTSTRAP": kafka.bootstrap,
                "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": kafka.topic_namespace,
                "SLOTFLOW_PG_DSN": pg_dsn,
                "SLOTFLOW_API_PORT": str(self.port),
                "SLOTFLOW_API_BOOTSTRAP_TOKEN": TEST_TOKEN,
            }
        )
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slotflow_api", "serve", "--no-projector"],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=self._log,
        )
        self.base = f"http://127.0.0.1:{self.port}"

    async def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError("the api exited")
        try:
            async with httpx.AsyncClient(timeout=2) as client:
                return (await client.get(f"{self.base}/healthz")).status_code == 200
        except httpx.HTTPError:
            return False

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self._log.close()


@pytest.fixture
async def api(kafka: KafkaSettings, pg_dsn: str, tmp_path: Path) -> AsyncIterator[ApiProcess]:
    process = ApiProcess(kafka, pg_dsn, tmp_path / "api.log")
    try:
        await assert_eventually(process.ready, timeout=60, interval=0.2, message="api ready")
        yield process
    finally:
        process.close()


async def raw_post(port: int, path: str, *, total: int, declared: bool) -> int:
    """POST ``total`` bytes (declared in Content-Length, or chunked); the response's status.

    The body goes out while the response is awaited, as a client that does not wait for 100
    Continue would send it; the sender stops when the answer arrives or the server hangs up.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    framing = f"Content-Length: {total}" if declared else "Transfer-Encoding: chunked"
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\n{framing}\r\n\r\n".encode()
    )
    chunk = b"[" + b" " * (64 * 1024 - 2) + b"]"

    async def pump() -> None:
        sent = 0
        while sent < total:
            piece = chunk[: total - sent]
            writer.write(piece if declared else f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
            sent += len(piece)
        if not declared:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    sending = asyncio.create_task(pump())
    try:
        status_line = await asyncio.wait_for(reader.readline(), timeout=120)
    finally:
        sending.cancel()
        with contextlib.suppress(BaseException):
            await sending
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return int(status_line.split()[1])


async def test_oversized_bodies_get_413_and_the_api_memory_stays_bounded(api: ApiProcess) -> None:
    pid = api.proc.pid
    async with httpx.AsyncClient(timeout=30, headers=AUTH) as client:
        # Warm up the paths a refused request touches, so the baseline includes them.
        await client.post(f"{api.base}/v1/schedules", json={})
    baseline = rss(pid)
    peak = baseline
    sampling = True

    async def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, rss(pid))
            await asyncio.sleep(0.01)

    sampler = asyncio.create_task(sample())
    try:
        statuses = [
            await raw_post(api.port, "/v1/schedules", total=300 * MIB, declared=True),
            await raw_post(api.port, "/v1/schedules", total=300 * MIB, declared=False),
            await raw_post(api.port, "/v1/schedules", total=10 * MIB, declared=True),
            await raw_post(api.port, "/v1/schedules", total=10 * MIB, declared=False),
        ]
        async with httpx.AsyncClient(timeout=60, headers=AUTH) as client:
            response = await client.post(
                f"{api.base}/v1/schedules",
                content=b'{"x": "' + b"a" * (10 * MIB) + b'"}',
                # A JSON body, as the CSRF guard asks (without it the answer is a 403, not a 413).
                headers={"Content-Type": "application/json"},
            )
    finally:
        sampling = False
        await sampler
    after = rss(pid)
    assert statuses == [413, 413, 413, 413]
    assert response.status_code == 413
    assert "the limit is 1048576 bytes" in response.json()["detail"]
    assert peak - baseline < RSS_BOUND, f"peak grew {(peak - baseline) / MIB:.0f} MiB"
    assert after - baseline < RSS_BOUND, f"kept {(after - baseline) / MIB:.0f} MiB"
    assert api.proc.poll() is None


async def test_a_command_too_large_for_kafka_is_413_not_500(api_settings: Settings) -> None:
    # Body and payload limits above Kafka's record limit (1 MiB): the body is read, the record is
    # refused by the producer.
    settings = api_settings.model_copy(
        update={
            "api": api_settings.api.model_copy(
                update={"max_body_bytes": 4 * MIB, "max_payload_bytes": 4 * MIB}
            )
        }
    )
    application = create_app(settings)
    definition = {
        "spec": {"kind": "cron", "expression": "*/5 * * * *"},
        "handler": "h.x",
        "payload": {"blob": "a" * (2 * MIB)},
    }
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api.test", timeout=40, headers=AUTH
        ) as client:
            response = await client.post(
                "/v1/schedules", json={"schedule_id": "big", "definition": definition}
            )
            small = await client.post(
                "/v1/schedules", json={"schedule_id": "small", "definition": {**definition, "payload": {}}}
            )
    assert response.status_code == 413
    assert "too large to publish" in response.json()["detail"]
    assert small.status_code == 202


def nested(depth: int) -> dict[str, object]:
    """A payload whose own object is level 1 and that nests ``depth`` levels in all."""
    value: dict[str, object] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


DEFINITION = {"spec": {"kind": "cron", "expression": "*/5 * * * *"}, "handler": "h.x"}


async def test_nesting_its_consumers_could_not_decode_is_refused(client: httpx.AsyncClient) -> None:
    # Before: 202, then the ticker and the projector parked it ("recursion limit exceeded") and
    # the schedule silently never existed.
    deep = await client.post(
        "/v1/schedules", json={"schedule_id": "deep", "definition": {**DEFINITION, "payload": nested(200)}}
    )
    assert deep.status_code == 422
    assert deep.json()["detail"] == "definition.payload: is nested 200 levels deep; the limit is 99"
    # The deepest payload accepted: a value may nest FIELD_MAX_DEPTH levels wherever it is carried.
    fits = await client.post(
        "/v1/schedules",
        json={"schedule_id": "fits", "definition": {**DEFINITION, "payload": nested(FIELD_MAX_DEPTH)}},
    )
    assert fits.status_code == 202, fits.text


async def test_a_schedule_payload_over_the_cap_is_refused_naming_the_setting(
    client: httpx.AsyncClient,
) -> None:
    big = await client.post(
        "/v1/schedules",
        json={"schedule_id": "big", "definition": {**DEFINITION, "payload": {"blob": "a" * 900_000}}},
    )
    assert big.status_code == 422
    assert "SLOTFLOW_API_MAX_PAYLOAD_BYTES" in big.json()["detail"]
    assert "the limit per schedule is 65536 bytes" in big.json()["detail"]


@pytest.mark.parametrize(
    "case", [c for c in bad_requests() if c.body_bytes <= 10 * MIB], ids=lambda c: c.name
)
async def test_the_bad_request_catalogue_gets_clear_4xx(client: httpx.AsyncClient, case: BadRequest) -> None:
    # The 300 MB body is sent to a real process above (memory watched); the rest in-process.
    content = b"[" + b" " * (case.body_bytes - 2) + b"]" if case.body_bytes else None
    response = await client.request(
        case.method,
        case.path,
        json=case.json if content is None else None,
        content=content,
        params=case.params,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == case.status, response.text
    assert case.detail in response.json()["detail"]
