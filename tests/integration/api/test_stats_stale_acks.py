"""An event faust's stream skipped in a rebalance must not become committable before it is
processed (slotflow_stats.consumer): faust acks it, and a commit after the rebalance could pass it
before it is delivered again; a SIGKILL then loses it.

Run in the stats environment (faust lives only there); no broker is needed: the probe acks
messages through `Message.ack`, the route faust's stream takes, and asks the consumer which
offset it would commit."""

import json

from tests.integration.api.stats_support import run_stats_probe

PROBE = """
import asyncio, json
asyncio.set_event_loop(asyncio.new_event_loop())
import faust
from faust.types import TP
from faust.types.tuples import ConsumerMessage
from slotflow_stats.consumer import install_processed_only_acks

TOPIC = "events"

def message(offset, generation):
    return ConsumerMessage(TOPIC, 0, offset, 0.0, None, None, b"k", b"v", None, generation_id=generation)

def committable(guarded, case):
    app = faust.App("probe", broker="kafka://127.0.0.1:1", store="memory://")
    if guarded:
        install_processed_only_acks(app)
    consumer = app.consumer
    app.topics._acking_topics.add(TOPIC)
    app.consumer_generation_id = 2
    app.flow_control.resume()  # as a started worker's is, between rebalances
    tp = TP(TOPIC, 0)
    consumer._committed_offset[tp] = 5  # the next offset to read, as after a seek
    if case == "processed":
        m = message(5, 2)
    elif case == "old generation":
        m = message(5, 1)
    else:  # flow suspended: partitions are moving
        app.flow_control.suspend()
        m = message(5, 2)
    consumer._unacked_messages.add(m)
    m.ack(consumer)
    return {"offset": consumer._new_offset(tp), "done": m.acked, "waiting": len(consumer._unacked_messages)}

cases = ["processed", "old generation", "suspended"]
print(json.dumps({
    kind: {case: committable(kind == "ours", case) for case in cases} for kind in ("faust", "ours")
}))
"""


def test_a_skipped_event_is_done_but_not_committable() -> None:
    stdout = run_stats_probe(PROBE)
    result = json.loads(stdout.strip().splitlines()[-1])
    ours, stock = result["ours"], result["faust"]
    # A processed event is committable (offset 5 done: commit 6), with or without the guard.
    assert ours["processed"] == stock["processed"] == {"offset": 6, "done": True, "waiting": 0}
    for case in ("old generation", "suspended"):
        # Done, so a rebalance's wait_empty ends, but nothing to commit: it comes again after the seek.
        assert ours[case] == {"offset": None, "done": True, "waiting": 0}, case
        # faust's own consumer makes it committable (the loss this guards against); if an
        # upgrade stops that, this says so and the guard can go.
        assert stock[case]["offset"] == 6, (case, stock[case])
