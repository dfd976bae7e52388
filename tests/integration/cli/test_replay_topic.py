"""`slotflow replay --topic`: histories read from the real workflow-history topic, replayed against code."""

import asyncio
import os
import sys
from pathlib import Path

from slotflow.contracts import Envelope
from slotflow.contracts.topics import WORKFLOW_HISTORY
from slotflow.kafka.producer import Producer
from slotflow.kafka.reading import read_to_end
from slotflow.settings import KafkaSettings
from tests.unit.cli.replay_samples import recorded
from tests.unit.cli.replay_samples.recorder import envelopes, record

ROOT = Path(__file__).parents[3]
SCRIPT = Path(sys.executable).with_name("slotflow")
SAMPLES = "tests.unit.cli.replay_samples"


async def slotflow(kafka: KafkaSettings, *argv: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTFLOW_")}
    env.update(SLOTFLOW_KAFKA_BOOTSTRAP=kafka.bootstrap, SLOTFLOW_KAFKA_TOPIC_NAMESPACE=kafka.topic_namespace)
    process = await asyncio.create_subprocess_exec(
        str(SCRIPT), *argv, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def publish_histories(kafka: KafkaSettings) -> int:
    topic = kafka.topic(WORKFLOW_HISTORY)
    histories = [
        record(recorded.Pay, "samples.pay", "order-1", {"id": 1}),
        record(recorded.Refund, "samples.refund", "refund-1", {"id": 1}),
        record(recorded.Pay, "samples.pay", "order-2", {"id": 2}),
    ]
    items = [(topic, Envelope.model_validate(e)) for h in histories for e in envelopes(h)]
    async with Producer(kafka, client_id="history-seed") as producer:
        await producer.send_many(items)
    return len(items)


async def test_histories_on_the_topic_replay_against_the_code_they_were_recorded_with(
    kafka: KafkaSettings,
) -> None:
    published = await publish_histories(kafka)
    assert len(await read_to_end(kafka, kafka.topic(WORKFLOW_HISTORY))) == published

    code, out, err = await slotflow(kafka, "replay", "--topic", "--module", f"{SAMPLES}.recorded")
    assert code == 0, err
    assert sorted(out.splitlines()) == [
        "ok  order-1  samples.pay  8 events, completed",
        "ok  order-2  samples.pay  8 events, completed",
        "ok  refund-1  samples.refund  4 events, completed",
    ]

    code, out, err = await slotflow(
        kafka, "replay", "--topic", "--type", "samples.refund", "--module", f"{SAMPLES}.recorded"
    )
    assert (code, out.split()[:2]) == (0, ["ok", "refund-1"]), err


async def test_changed_code_exits_1_with_the_diff_for_the_chosen_workflow(kafka: KafkaSettings) -> None:
    await publish_histories(kafka)

    code, out, err = await slotflow(
        kafka, "replay", "--topic", "--workflow-id", "order-2", "--module", f"{SAMPLES}.renamed"
    )

    assert code == 1, err
    assert out.splitlines()[:2] == ["MISMATCH  order-2  samples.pay", "  sequence: 6"]
    assert "payments.capture" in out.splitlines()[2]
    assert "payments.charge" in out.splitlines()[3]
    assert "workflow order-2 does not replay at sequence 6" in err


async def test_a_namespace_without_the_history_topic_is_a_clear_error(kafka: KafkaSettings) -> None:
    elsewhere = kafka.model_copy(update={"topic_namespace": f"{kafka.topic_namespace}-missing"})

    code, _, err = await slotflow(elsewhere, "replay", "--topic", "--module", f"{SAMPLES}.recorded")

    assert code == 1
    assert f"topic {elsewhere.topic(WORKFLOW_HISTORY)} does not exist on the broker" in err
