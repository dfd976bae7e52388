"""A history event's outbox row, spliced around the event's stored JSON, is byte for byte the row
the envelope models give (`encoded(Staged(topic, wrap(event, ...)))`): consumers, the relay and
the fault suite's checker see no difference."""

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from slotflow.contracts import ActivityScheduled, HistoryEvent, StartWorkflow, history_event_id, wrap
from slotflow.contracts.codec import decode
from slotflow.contracts.topics import WORKFLOW_HISTORY
from slotflow.pg.outbox import Encoded, Staged, encoded
from slotflow.settings import KafkaSettings
from slotflow_orchestrator.outbound import SOURCE, Outbound
from slotflow_orchestrator.stepping import Row, step
from tests.unit.orchestrator.test_due_timers import NOW, RECORDS, WF, completed, item, workflow_code

KAFKA = KafkaSettings()


def model_row(event: HistoryEvent, workflow_id: str, now: datetime) -> Encoded:
    envelope = wrap(
        event,
        id=history_event_id(workflow_id, event.sequence),
        key=workflow_id,
        source=SOURCE,
        occurred_at=now,
    )
    return encoded(Staged(KAFKA.topic(WORKFLOW_HISTORY), envelope))


def spliced_row(event: HistoryEvent, workflow_id: str, now: datetime) -> Encoded:
    return Outbound(KAFKA).history_row(workflow_id, event, event.model_dump_json(), now)


def test_every_event_of_a_real_run_splices_to_the_models_bytes() -> None:
    runtime = workflow_code()
    data = {"amount": 12.5, "note": "zahlung für Ärzte ✓", "nested": {"list": [1, None, True, "x"]}}
    first = step(
        WF,
        None,
        [],
        [item(StartWorkflow(workflow_id=WF, workflow_type="test.zero_sleep", input=data), "c1", 1)],
        workflow_code=runtime,
        now=NOW,
    )
    history: list[HistoryEvent] = list(first.events)
    second = step(
        WF,
        Row("test.zero_sleep", "running"),
        history,
        [completed(2, 2)],
        workflow_code=runtime,
        now=NOW,
        records=RECORDS,
    )
    history += second.events
    third = step(
        WF,
        Row("test.zero_sleep", "running"),
        history,
        [completed(6, 3)],
        workflow_code=runtime,
        now=NOW,
        records=RECORDS,
    )
    history += third.events
    assert len(history) >= 8
    for event in history:
        assert spliced_row(event, WF, NOW) == model_row(event, WF, NOW)


def test_rows_put_the_history_first_and_spliced() -> None:
    runtime = workflow_code()
    start = item(StartWorkflow(workflow_id=WF, workflow_type="test.zero_sleep", input={}), "c", 1)
    out = step(WF, None, [], [start], workflow_code=runtime, now=NOW)
    rows = Outbound(KAFKA).rows(out, out.events, now=NOW)
    history = [r for r in rows if isinstance(r, Encoded)]
    assert [decode(r.value).id for r in history] == [history_event_id(WF, e.sequence) for e in out.events]
    assert all(isinstance(r, Staged) for r in rows[len(history) :])


#: Text the acceptance rule lets through (no NUL: every message refuses one).
storable_text = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]))
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | storable_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(storable_text, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    payload=st.dictionaries(storable_text, json_values, max_size=4),
    workflow_id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,40}", fullmatch=True),
    sequence=st.integers(min_value=1, max_value=10**6),
    micros=st.integers(min_value=0, max_value=999_999),
)
def test_any_payload_splices_to_the_models_bytes(
    payload: dict[str, Any], workflow_id: str, sequence: int, micros: int
) -> None:
    event = ActivityScheduled(
        workflow_id=workflow_id,
        sequence=sequence,
        activity="a.b",
        run_id=f"{workflow_id}/{sequence}",
        payload=payload,
        schedule_to_close_deadline=NOW + timedelta(minutes=5),
    )
    now = NOW.replace(microsecond=micros).astimezone(UTC)
    assert spliced_row(event, workflow_id, now) == model_row(event, workflow_id, now)
