"""A TCP forwarder the harness owns between one service and PostgreSQL or Kafka, to break the network.

This kernel has no netem, so the network faults are made here: every byte a service exchanges with
PostgreSQL, and with the broker, passes through a `FaultyProxy` of its own, which can add latency to
each chunk, stall both directions (the connections stay open, nothing moves: a partition), or drop
every connection at once (a reset). Chunks are forwarded in order per direction, so latency delays
a stream without reordering it.

A Kafka client bootstraps through one address and then connects to the address the broker
advertises, which would route around a forwarder. So the broker has one extra listener per service
(SLOTFLOW_KAFKA_EXTRA_LISTENERS), advertised at that service's proxy port: the metadata a service
receives points back at its own proxy, and every connection it opens passes through it.
"""

import asyncio
import contextlib
import logging

log = logging.getLogger(__name__)

CHUNK = 65536


class FaultyProxy:
    """Forwards 127.0.0.1:`port` to the upstream address; faults are switched on and off."""

    def __init__(self, name: str, upstream_host: str, upstream_port: int) -> None:
        self.name = name
        self._upstream = (upstream_host, upstream_port)
        self._server: asyncio.Server | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._latency_s = 0.0
        self._writers: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self, port: int = 0) -> int:
        """Listen on ``port`` (0: any free one); a broker advertises a fixed one, so its proxy needs it."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.drop()
        for task in list(self._pumps):
            task.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    async def latency(self, seconds: float, *, for_s: float) -> None:
        """Delay every chunk by ``seconds`` for ``for_s`` seconds."""
        self._latency_s = seconds
        try:
            await asyncio.sleep(for_s)
        finally:
            self._latency_s = 0.0

    async def stall(self, *, for_s: float) -> None:
        """Move nothing in either direction for ``for_s`` seconds; connections stay open."""
        self._flowing.clear()
        try:
            await asyncio.sleep(for_s)
        finally:
            self._flowing.set()

    def drop(self) -> int:
        """Reset every open connection (both sides see the peer vanish); returns how many."""
        writers, self._writers = self._writers, set()
        for writer in writers:
            transport = writer.transport
            if not transport.is_closing():
                transport.abort()
        return len(writers) // 2

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            client_writer.transport.abort()
            return
        self._writers.update((client_writer, upstream_writer))
        for source, sink in ((client_reader, upstream_writer), (upstream_reader, client_writer)):
            task = asyncio.create_task(self._pump(source, sink))
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while chunk := await source.read(CHUNK):
                await self._flowing.wait()
                if self._latency_s:
                    await asyncio.sleep(self._latency_s)
                sink.write(chunk)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(sink)
            with contextlib.suppress(Exception):
                sink.transport.abort()
