"""The system suite's rules on redrives and retries can fail: a recorded run in which an operator
resumed a parked reservation, then saw both doors refuse once the saga had compensated it, passes;
each violation injected into it (a step run again after its compensation, a redrive request lost,
a refused retry that retried, a parked step run without a retry, a step completed twice, a retry
unanswered) is reported with its ids."""

from dataclasses import replace
from datetime import timedelta

from tests.chaos.system.checker import (
    APPLIED,
    COLLAPSED,
    Effect,
    OrderUnderTest,
    Recording,
    RedriveRequestSeen,
    RedriveUnderTest,
    RetryUnderTest,
    check,
)
from tests.unit.system.test_checker import T0, recorded_run

PARKED = "order-park-decline-7"
RESERVE = 2
LETTER = "jobs.due:1:40"
REQUEST_WAITING = "a" * 32
REQUEST_CLOSED = "b" * 32
REQUEST_POISON = "c" * 32


def with_parking_order() -> Recording:
    """recorded_run() and a parking order: its reservation parked, resumed by a redrive of its
    letter while it waited, then compensated (its capture declined); a retry and a redrive after it
    failed both refused with the reason; a bulk redrive of poison refused by its owner."""
    rec = recorded_run()
    effects = list(rec.effects)

    def add(kind: str, step: int, at_s: float, phase: str = APPLIED) -> None:
        effects.append(
            Effect(
                len(effects) + 1,
                f"order.{kind}",
                PARKED,
                f"{PARKED}/{step}",
                phase,
                1,
                "claimer-1",
                T0 + timedelta(seconds=at_s),
            )
        )

    for step, (kind, at_s) in enumerate(
        (("authorize", 1), ("reserve", 9), ("release", 12), ("void", 13)), start=1
    ):
        add(kind, step, at_s)
    runs = {f"{PARKED}/{step}" for step in range(1, 5)}
    return replace(
        rec,
        orders=[*rec.orders, OrderUnderTest(PARKED, declines=True, parks=True)],
        effects=effects,
        runs_started=rec.runs_started | runs,
        runs_ended=rec.runs_ended | runs,
        workflows_ended={**rec.workflows_ended, PARKED: "workflow.failed"},
        compensations_registered={**rec.compensations_registered, PARKED: ["void", "release"]},
        activity_runs={(PARKED, RESERVE): f"{PARKED}/{RESERVE}"},
        activities_parked={(PARKED, RESERVE)},
        activity_retries={(PARKED, 4): (RESERVE, "operator-redrive-1")},
        activity_results={(PARKED, 5): (RESERVE, {"run_id": f"{PARKED}/{RESERVE}"})},
        operator_retries=[RetryUnderTest("operator-retry-2", PARKED, RESERVE, "after it failed")],
        operator_redrives=[
            RedriveUnderTest("operator-redrive-1", "waiting", 200),
            RedriveUnderTest("operator-redrive-3", "after it failed", 200),
            RedriveUnderTest("operator-redrive-4", "bulk undecodable", 200),
        ],
        accepted=rec.accepted | {"operator-redrive-1", "operator-redrive-3", "operator-redrive-4"},
        rejected={
            **rec.rejected,
            "operator-retry-2": f"{PARKED} already compensated this step: system.reserve #2 completed at #5, "
            "then system.release #9 ran",
        },
        redrive_requests={
            REQUEST_WAITING: RedriveRequestSeen(
                REQUEST_WAITING, LETTER, "operator-redrive-1", "orchestrator", "activity", PARKED, RESERVE
            ),
            REQUEST_CLOSED: RedriveRequestSeen(
                REQUEST_CLOSED, LETTER, "operator-redrive-3", "orchestrator", "activity", PARKED, RESERVE
            ),
            REQUEST_POISON: RedriveRequestSeen(
                REQUEST_POISON,
                "slotflow.workflows.commands.v1:0:3",
                "operator-redrive-4",
                "orchestrator",
                "record",
            ),
        },
        redrive_outcomes={
            REQUEST_WAITING: ("done", "retried activity system.reserve #2"),
            REQUEST_CLOSED: ("refused", f"{PARKED} already compensated this step"),
            REQUEST_POISON: ("refused", "undecodable: not JSON"),
        },
        letter_statuses={LETTER: "redrive_failed", "slotflow.workflows.commands.v1:0:3": "redrive_failed"},
    )


def violations(rec: Recording) -> list[tuple[str, tuple[str, ...]]]:
    return [(v.kind, v.ids) for v in check(rec).violations]


def test_a_parked_step_resumed_then_compensated_and_refused_after_passes() -> None:
    report = check(with_parking_order())
    assert report.violations == [], report.render()
    assert report.counts["parking sagas resumed, then failed"] == 1
    assert report.counts["activities parked"] == 1
    assert report.counts["parked activities retried, then run once"] == 1
    assert report.counts["redrive requests redriven"] == 1
    assert report.counts["redrive requests refused with a reason"] == 2
    assert report.counts["retries refused with a reason"] == 1
    assert report.counts["operator redrives answered"] == 3


def test_a_compensated_step_that_runs_again_after_its_compensation_is_reported() -> None:
    rec = with_parking_order()
    # A redrive the orchestrator should have refused: the reservation again, after its release.
    again = Effect(
        99,
        "order.reserve",
        PARKED,
        f"{PARKED}/{RESERVE}",
        COLLAPSED,
        2,
        "claimer-2",
        T0 + timedelta(seconds=20),
    )
    assert violations(replace(rec, effects=[*rec.effects, again])) == [
        ("compensated step ran again", (PARKED, f"{PARKED}/{RESERVE}", "seq=99"))
    ]


def test_a_redrive_request_neither_answered_nor_redriving_is_reported() -> None:
    rec = with_parking_order()
    outcomes = {k: v for k, v in rec.redrive_outcomes.items() if k != REQUEST_POISON}
    lost = replace(rec, redrive_outcomes=outcomes)
    assert violations(lost) == [
        ("redrive request lost", ("slotflow.workflows.commands.v1:0:3", "orchestrator", REQUEST_POISON))
    ]
    # Unanswered but visibly waiting for its owner: not lost.
    waiting = replace(
        lost, letter_statuses={**rec.letter_statuses, "slotflow.workflows.commands.v1:0:3": "redriving"}
    )
    assert violations(waiting) == []
    assert check(waiting).counts["redrive requests still redriving, visibly"] == 1


def test_a_redrive_refused_without_a_reason_is_reported() -> None:
    rec = with_parking_order()
    silent = replace(rec, redrive_outcomes={**rec.redrive_outcomes, REQUEST_POISON: ("refused", " ")})
    assert [kind for kind, _ in violations(silent)] == ["redrive refused without a reason"]


def test_a_refused_retry_or_redrive_that_retried_the_activity_is_reported() -> None:
    rec = with_parking_order()
    by_retry = replace(
        rec, activity_retries={**rec.activity_retries, (PARKED, 10): (RESERVE, "operator-retry-2")}
    )
    assert (
        "refused retry changed the workflow",
        ("operator-retry-2", PARKED, "sequence=2", "after it failed"),
    ) in (violations(by_retry))
    by_redrive = replace(
        rec, activity_retries={**rec.activity_retries, (PARKED, 10): (RESERVE, "operator-redrive-3")}
    )
    assert violations(by_redrive) == [("refused retry changed the workflow", (LETTER, PARKED, "sequence=2"))]


def test_a_parked_step_that_ran_without_a_retry_or_completed_twice_is_reported() -> None:
    rec = with_parking_order()
    unretried = replace(
        rec,
        activity_retries={},
        redrive_requests={k: v for k, v in rec.redrive_requests.items() if k != REQUEST_WAITING},
    )
    assert violations(unretried) == [
        ("parked activity ran without a retry", (PARKED, "sequence=2", f"{PARKED}/{RESERVE}"))
    ]
    twice = replace(
        rec, activity_results={**rec.activity_results, (PARKED, 6): (RESERVE, {"run_id": f"{PARKED}/2"})}
    )
    assert violations(twice) == [("retried activity completed twice", (PARKED, "sequence=2"))]


def test_a_retry_or_redrive_command_left_unanswered_is_reported() -> None:
    rec = with_parking_order()
    rejected = {k: v for k, v in rec.rejected.items() if k != "operator-retry-2"}
    assert violations(replace(rec, rejected=rejected)) == [
        ("retry unanswered", ("operator-retry-2", PARKED, "sequence=2", "after it failed"))
    ]
    unanswered = replace(rec, accepted=rec.accepted - {"operator-redrive-4"})
    assert violations(unanswered) == [
        ("redrive command unanswered", ("operator-redrive-4", "bulk undecodable"))
    ]
