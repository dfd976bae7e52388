"""What a downstream failure blames, and how a held run is written (pure parts of the gate)."""

import json
from datetime import timedelta

import pytest

from slotflow.contracts import RetryPolicy
from slotflow.errors import DownstreamUnavailable, PermanentError
from slotflow_claimer.downstreams import _failed
from slotflow_claimer.outcomes import Outcome
from tests.unit.claimer.support import run

DECLARED = ["bank-api", "ledger"]


def test_a_named_downstream_alone_is_blamed() -> None:
    assert _failed(run(), DECLARED, DownstreamUnavailable("ledger")) == {"ledger"}
    # Named but not declared: still that downstream's failure (the handler said so).
    assert _failed(run(), DECLARED, DownstreamUnavailable("fx-rates")) == {"fx-rates"}


@pytest.mark.parametrize("error", [ConnectionError("reset"), TimeoutError()])
def test_a_transient_error_blames_every_declared_downstream(error: Exception) -> None:
    assert _failed(run(), DECLARED, error) == set(DECLARED)


def test_a_permanent_error_or_success_blames_none() -> None:
    assert _failed(run(), DECLARED, PermanentError("card declined")) == set()
    assert _failed(run(), DECLARED, None) == set()

    class Declined(Exception):
        pass

    policy = RetryPolicy(non_retryable=("Declined",))
    assert _failed(run(retry=policy), DECLARED, Declined()) == set()


def test_a_held_run_is_retrying_with_its_attempt_given_back() -> None:
    held = Outcome(
        run(attempt=3, round_start=2),
        "held",
        error=DownstreamUnavailable("bank-api", "held: circuit_open"),
        delay=timedelta(seconds=4),
        held_reason="circuit_open:bank-api",
        retryable=True,
    )
    write = held.write()
    assert write.state == "retrying"
    assert write.refund == 1
    assert write.held_reason == "circuit_open:bank-api"
    assert json.loads(write.entry or "{}")["event"] == "held"
    assert json.loads(write.error or "{}")["reason"] == "circuit_open:bank-api"
    # An ordinary failure spends its attempt.
    failed = Outcome(run(attempt=3), "failed", error=ConnectionError(), delay=timedelta(seconds=1)).write()
    assert (failed.refund, failed.held_reason) == (0, None)
