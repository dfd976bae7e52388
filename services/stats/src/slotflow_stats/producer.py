"""A producer buffer whose flush waits for every message: faust's returns after 0.1 s of no progress.

faust commits source offsets right after `producer.flush()` (faust/transport/consumer.py,
`_commit_offsets`), and the transport's flush first drains faust's own buffer of table changelog
writes, then flushes aiokafka. But `ProducerBuffer.flush` gives up when no message was sent for
0.1 s, and never counts the message its sender task is publishing at that moment; on a loaded
broker the offsets of events whose changelog writes were still in that buffer are committed, and a
SIGKILL then loses those counts for good (seen: one count of a 60 s window lost after a kill,
tests/chaos/stats). This buffer's flush returns only when the buffer is empty and nothing is in
flight, so a commit never overtakes the changelog writes of the events it covers.
"""

import asyncio
import contextlib
from typing import Any

from faust.transport.producer import ProducerBuffer


class DrainingProducerBuffer(ProducerBuffer):  # type: ignore[misc]  # faust is untyped here
    """faust's buffer, with a flush that waits for the last message (see the module docstring)."""

    #: Messages taken off the queue whose publish has not returned yet (faust's `size` omits them).
    in_flight = 0

    async def _send_pending(self, fut: Any) -> None:
        # Counted before the first await: the sender takes a message off the queue and calls this
        # in the same step, so there is no moment where a message is in neither count.
        self.in_flight += 1
        try:
            await super()._send_pending(fut)
        finally:
            self.in_flight -= 1

    async def flush(self) -> None:
        """Wait until every buffered message was handed to aiokafka (which flushes next)."""
        while self.size or self.in_flight:
            if self.state != "running":
                raise RuntimeError("Cannot flush: Producer not Running")
            self.message_sent.clear()
            # A timeout only re-checks: a message sent between the check and clear() must not hang us.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.message_sent.wait(), timeout=0.1)


def install_draining_buffer(app: Any) -> None:
    """Make ``app``'s producer use DrainingProducerBuffer (before the app starts).

    faust builds the buffer inside its Producer's constructor and offers no setting for its class;
    the subclass adds only methods and a counter, so switching the instance's class is safe.
    """
    buffer = app.producer.buffer
    if not isinstance(buffer, ProducerBuffer):
        raise TypeError(f"unexpected faust producer buffer {type(buffer).__name__}")
    buffer.__class__ = DrainingProducerBuffer
