"""The stats worker's health listener: /livez always, /readyz only while copies to PostgreSQL
succeed, nothing else answered, on a real loopback socket."""

import asyncio

import pytest

from slotflow_stats.health import FlushClock, answer, serve_health


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_ready_only_after_a_copy_and_while_copies_keep_succeeding() -> None:
    clock = Clock()
    flushes = FlushClock(clock)
    assert answer("/readyz", flushes, stale_after=60)[0] == 503
    assert "starting" in answer("/readyz", flushes, stale_after=60)[1]["detail"]
    flushes.copied()
    clock.now += 59
    assert answer("/readyz", flushes, stale_after=60) == (200, {"status": "ok"})
    clock.now += 2
    status, body = answer("/readyz", flushes, stale_after=60)
    assert status == 503
    assert "no successful copy to PostgreSQL for 61 s" in body["detail"]


def test_alive_whatever_the_copies_and_unknown_paths_are_404() -> None:
    flushes = FlushClock(Clock())
    assert answer("/livez", flushes, stale_after=1) == (200, {"status": "ok"})
    assert answer("/tables", flushes, stale_after=1)[0] == 404


async def request(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


@pytest.mark.parametrize(
    ("raw", "status_line"),
    [
        (b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 200 OK"),
        (b"GET /readyz?probe=1 HTTP/1.1\r\n\r\n", b"HTTP/1.1 503 Service Unavailable"),
        (b"POST /livez HTTP/1.1\r\n\r\n", b"HTTP/1.1 405 Method Not Allowed"),
        (b"garbage\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
    ],
)
async def test_the_listener_answers_over_a_socket(raw: bytes, status_line: bytes) -> None:
    server = await serve_health("127.0.0.1", 0, FlushClock(), stale_after=60)
    port = server.sockets[0].getsockname()[1]
    async with server:
        reply = await request(port, raw)
    assert reply.startswith(status_line), reply
    assert b"Content-Type: application/json" in reply


async def test_it_binds_loopback_by_default() -> None:
    from slotflow_stats.config import StatsSettings

    assert StatsSettings().health_host == "127.0.0.1"
    assert StatsSettings().health_port == 0


async def test_metrics_are_served_in_the_prometheus_text_format() -> None:
    from slotflow_stats.metrics import StatsMetrics

    metrics = StatsMetrics()
    metrics.events.labels("runs").inc(3)
    server = await serve_health("127.0.0.1", 0, FlushClock(), stale_after=60, metrics=metrics.render)
    port = server.sockets[0].getsockname()[1]
    async with server:
        reply = await request(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        head = await request(port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 OK"), reply
    assert b"Content-Type: text/plain; version=0.0.4; charset=utf-8" in reply
    assert b'slotflow_stats_events_total{family="runs"} 3.0' in reply
    assert head.endswith(b"\r\n\r\n")
    # Without a registry the path is unknown, as before.
    bare = await serve_health("127.0.0.1", 0, FlushClock(), stale_after=60)
    async with bare:
        missing = await request(bare.sockets[0].getsockname()[1], b"GET /metrics HTTP/1.1\r\n\r\n")
    assert missing.startswith(b"HTTP/1.1 404 Not Found")
