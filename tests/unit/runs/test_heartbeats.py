"""Activity heartbeats, the pure parts: the details a handler may record, the throttle of their
writes, the policy's heartbeat_timeout on the wire, and `ctx.heartbeat` on a hand-built context."""

import asyncio
import json
import pickle
import threading
from datetime import timedelta

import pytest
from pydantic import BaseModel, ValidationError

from slotflow.contracts import RetryPolicy
from slotflow.errors import ConfigurationError
from slotflow.runs import HEARTBEAT_DETAILS_MAX_BYTES, HeartbeatDetailsError, HeartbeatTimeout, RunContext
from slotflow.runs.heartbeats import (
    DEFAULT_THROTTLE_SECONDS,
    MAX_THROTTLE_SECONDS,
    Throttle,
    details_json,
    silence_message,
    throttle_seconds,
)
from slotflow.testing import run_context


class Progress(BaseModel):
    file: str
    offset: int


def test_details_are_recorded_as_json_models_included() -> None:
    assert json.loads(details_json({"done": [1, 2], "cursor": "c-9"})) == {"done": [1, 2], "cursor": "c-9"}
    assert json.loads(details_json(Progress(file="a.csv", offset=120))) == {"file": "a.csv", "offset": 120}
    assert json.loads(details_json(7)) == 7


@pytest.mark.parametrize(
    ("details", "says"),
    [
        (object(), "must be JSON"),
        ({"note": "a\x00b"}, "NUL"),
        ({"ratio": float("nan")}, "heartbeat details"),
        ("x" * (HEARTBEAT_DETAILS_MAX_BYTES + 1), f"the limit is {HEARTBEAT_DETAILS_MAX_BYTES}"),
    ],
    ids=["not-json", "nul", "nan", "too-large"],
)
def test_details_that_cannot_be_recorded_are_refused_with_a_clear_error(details: object, says: str) -> None:
    with pytest.raises(HeartbeatDetailsError, match=says):
        details_json(details)


def test_a_details_error_is_permanent_and_a_heartbeat_timeout_is_retried() -> None:
    from slotflow.core.retry import is_retryable

    assert not is_retryable(HeartbeatDetailsError("too large"))
    assert is_retryable(HeartbeatTimeout("silent"))


def test_writes_are_throttled_to_four_fifths_of_the_timeout_within_bounds() -> None:
    assert throttle_seconds(timedelta(seconds=10)) == pytest.approx(8.0)
    assert throttle_seconds(timedelta(milliseconds=500)) == pytest.approx(0.4)
    assert throttle_seconds(timedelta(hours=1)) == MAX_THROTTLE_SECONDS
    assert throttle_seconds(None) == DEFAULT_THROTTLE_SECONDS


def test_the_throttle_lets_the_first_write_through_and_spaces_the_next() -> None:
    throttle = Throttle(2.0)
    assert throttle.wait(100.0) == 0.0
    throttle.wrote(100.0)
    assert throttle.wait(100.5) == pytest.approx(1.5)
    assert throttle.wait(102.0) == 0.0
    assert throttle.wait(105.0) == 0.0


def test_the_timeout_message_names_the_timeout_and_the_silent_claimer() -> None:
    said = silence_message(timedelta(seconds=1.5), owner="claimer-7")
    assert "heartbeat_timeout 1.5 s" in said
    assert "claimer claimer-7" in said
    assert "claimer" not in silence_message(timedelta(seconds=2)).split("s;")[0]


def test_the_policy_leaves_the_heartbeat_timeout_out_unless_set_so_older_consumers_read_it() -> None:
    assert "heartbeat_timeout" not in json.loads(RetryPolicy().model_dump_json())
    used = RetryPolicy(heartbeat_timeout=timedelta(seconds=1.5))
    dumped = json.loads(used.model_dump_json())
    # ISO 8601, which the claimer's claim reads in SQL (interval input) to set the first deadline.
    assert dumped["heartbeat_timeout"] == "PT1.5S"
    assert RetryPolicy.model_validate_json(used.model_dump_json()) == used
    old = {"base": "PT1S", "cap": "PT2M", "max_attempts": 5, "non_retryable": [], "start_to_close": "PT5M"}
    assert RetryPolicy.model_validate(old).heartbeat_timeout is None
    assert RetryPolicy.model_validate({"heartbeat_timeout": "30s"}).heartbeat_timeout == timedelta(seconds=30)


@pytest.mark.parametrize("value", ["PT0S", "-PT1S"])
def test_a_heartbeat_timeout_of_zero_or_less_is_refused_naming_the_field(value: str) -> None:
    with pytest.raises(ValidationError, match="heartbeat_timeout"):
        RetryPolicy.model_validate({"heartbeat_timeout": value})


def test_run_context_records_heartbeats_as_the_claimer_would() -> None:
    seen: list[object] = []
    ctx = run_context(heartbeat_details={"offset": 10}, heartbeats=seen)
    assert ctx.heartbeat_details == {"offset": 10}
    ctx.heartbeat(Progress(file="a.csv", offset=20))
    ctx.heartbeat()
    assert seen == [{"file": "a.csv", "offset": 20}, None]
    with pytest.raises(HeartbeatDetailsError):
        ctx.heartbeat(object())
    # A context without a listener (built by hand) checks the details and records nothing.
    run_context().heartbeat({"ok": True})


async def test_a_thread_handlers_heartbeat_reaches_the_claimers_loop() -> None:
    loop = asyncio.get_running_loop()
    seen: list[tuple[str | None, bool]] = []
    arrived = asyncio.Event()

    def hook(details: str | None) -> None:
        seen.append((details, threading.current_thread() is threading.main_thread()))
        arrived.set()

    ctx = RunContext(
        run_id="r",
        job_id="j",
        slot=run_context().slot,
        attempt=1,
        fence_token=1,
        payload={},
        kind="scheduled",
        owner="test",
        fenced=run_context().fenced,
        loop=loop,
        on_heartbeat=hook,
    )
    worker = threading.Thread(target=ctx.heartbeat, args=({"n": 1},))
    worker.start()
    await asyncio.wait_for(arrived.wait(), timeout=5)
    worker.join()
    assert [(json.loads(details or "null"), on_loop) for details, on_loop in seen] == [({"n": 1}, True)]


def test_a_process_pool_handlers_heartbeat_says_it_cannot() -> None:
    ctx = run_context(heartbeats=[])
    # What the claimer sends to a process-pool worker: picklable, and its heartbeat refuses.
    detached = pickle.loads(pickle.dumps(ctx.detached()))  # noqa: S301 - our own bytes
    with pytest.raises(ConfigurationError, match="process-pool handler cannot heartbeat"):
        detached.heartbeat({"n": 1})
