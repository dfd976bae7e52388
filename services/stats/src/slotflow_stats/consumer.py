"""A consumer whose committable offsets are only those of events the agents processed.

faust's stream skips an event fetched before a rebalance (its generation is not the app's any
more, or flow control is suspended while partitions move) and acks it all the same
(`Stream._py_aiter`: "we want to ack the filtered out message"). The ack makes its offset
committable. After the rebalance the consumer seeks back to the committed offset and the event
comes again, but a commit can land first: once the events before it are processed again, the
skipped one is contiguous with them. A SIGKILL in that moment loses it for good, since the next
worker starts after it (seen: one count of a 60 s window short after a kill, tests/chaos/stats,
in a clean-clone CI run where the worker had gone through a rebalance).

This consumer marks such an event as done (so `wait_empty` during a rebalance does not wait for
it) without making its offset committable. The event is delivered again after the seek and
counted then, or recognised by the window's offsets (`windows.apply`) if it was counted before
the rebalance; either way nothing is lost or doubled.
"""

from typing import Any

from faust.transport.consumer import Consumer


def stale(app: Any, message: Any) -> bool:
    """True when ``message`` was fetched before the current rebalance or arrives during one:
    the two cases in which faust's stream skips an event without processing it."""
    generation = getattr(message, "generation_id", None)
    if generation is not None and generation != app.consumer_generation_id:
        return True
    return not app.flow_control.is_active()


def install_processed_only_acks(app: Any) -> None:
    """Make ``app``'s consumer ack only processed events (before the app starts).

    faust builds the consumer from its transport and offers no hook for this, so the instance's
    `ack` is wrapped; `Message.ack` reaches it through the instance like any method.
    """
    consumer = app.consumer
    if not isinstance(consumer, Consumer):
        raise TypeError(f"unexpected faust consumer {type(consumer).__name__}")
    faust_ack = consumer.ack

    def ack(message: Any) -> bool:
        if stale(app, message):
            # Done, so a rebalance's wait for in-flight events ends; not committable.
            message.acked = True
            consumer._unacked_messages.discard(message)
            return False
        acked: bool = faust_ack(message)
        return acked

    consumer.ack = ack
