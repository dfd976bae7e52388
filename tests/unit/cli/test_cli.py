"""The command tree, exit codes and output, with the API replaced by an in-memory transport."""

import io
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from slotflow.cli.__main__ import execute, main
from slotflow.cli.context import Context
from slotflow.cli.output import render_table, spec_text
from slotflow.cli.parser import build_parser
from slotflow.cli.workflows import describe, replay_plan
from slotflow.contracts import (
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    CompensationRegistered,
    HistoryEvent,
    NonDeterminismDetected,
    SearchAttributesUpserted,
    TimerStarted,
    WorkflowStarted,
)
from slotflow.contracts.search import search_attribute

Responder = Callable[[httpx.Request], httpx.Response]

SCHEDULE = {
    "schedule_id": "merchant-payouts",
    "spec": {"kind": "cron", "expression": "0 2 * * *", "timezone": "Europe/Berlin"},
    "handler": "payouts.pay_merchants",
    "paused": False,
    "pause_reason": None,
    "tags": ["money-moving"],
    "next_fire_at": "2026-12-03T01:00:00Z",
    "created_at": "2026-12-01T00:00:00Z",
    "updated_at": "2026-12-01T00:00:00Z",
    "deleted": False,
}


def run(argv: list[str], responder: Responder | None = None) -> tuple[int, str, str, list[httpx.Request]]:
    """Parse ``argv`` and execute it against ``responder``; (exit code, stdout, stderr, requests)."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if responder is None:
            raise httpx.ConnectError("connection refused", request=request)
        return responder(request)

    args = build_parser().parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    code = execute(Context(args, out=out, err=err, api_transport=httpx.MockTransport(handle)))
    return code, out.getvalue(), err.getvalue(), seen


def reply(body: Any, status: int = 200) -> Responder:
    return lambda request: httpx.Response(status, json=body)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "required: GROUP"),
        (["schedule"], "required: ACTION"),
        (["schedule", "create", "x"], "required: --handler"),
        (["schedule", "create", "x", "--handler", "h"], "give exactly one of --cron, --every or --at"),
        (["schedule", "create", "x", "--handler", "h", "--cron", "* * *"], "needs 5 or 6 fields"),
        (
            ["schedule", "create", "x", "--handler", "h", "--cron", "* * * * *", "--tz", "Nowhere/Town"],
            "time zone",
        ),
        (
            ["schedule", "create", "x", "--handler", "h", "--every", "5m", "--payload", "{oops"],
            "not valid JSON",
        ),
        (["schedule", "create", "a b", "--handler", "h", "--every", "5m"], "not a valid identifier"),
        (
            ["schedule", "create", "x", "--handler", "h", "--every", "soon"],
            "--every 'soon' is not a duration",
        ),
        (
            ["schedule", "create", "x", "--handler", "h", "--misfire", "sometimes", "--every", "5m"],
            "invalid choice",
        ),
        (["schedule", "pause", "x", "--resume-at", "2026-01-01T00:00"], "has no UTC offset"),
        (["schedule", "backfill", "x", "--start", "now", "--end", "now-1d"], "end must be after start"),
        (["schedule", "list", "--limit", "0"], "--limit must be between 1 and 500"),
        (["workflow", "start", "w"], "required: --type"),
        (["workflow", "start", "w", "--type", "t", "--search-attribute", "Stage"], "give NAME=VALUE"),
        (["workflow", "start", "w", "--type", "t", "--search-attribute", "WorkflowId=x"], "built-in field"),
        (
            ["workflow", "start", "w", "--type", "t", "--search-attribute", "A=null"],
            "no search attribute type",
        ),
        (
            [
                "workflow",
                "start",
                "w",
                "--type",
                "t",
                "--search-attribute",
                "A=1",
                "--search-attribute",
                "A=2",
            ],
            "A is given twice",
        ),
        (["workflow", "start", "w", "--type", "t", "--memo", "[1]"], "--memo must be a JSON object"),
        (["workflow", "signal", "w", "go", "--payload", "3"], "must be a JSON object"),
        (["runs", "list", "--from", "now-1d"], "add --schedule"),
        (["runs", "list", "--schedule", "a", "--job", "b"], "not both"),
        (["dlq", "redrive"], "say which dead letters"),
        # Every other spelling of "every letter" is refused the same way (DeadLetterFilter.narrows).
        (["dlq", "redrive", "--status", "parked"], "--status alone still means every one"),
        (
            ["dlq", "redrive", "--since", "1970-01-01T00:00:00Z"],
            "--since/--until alone still means every one",
        ),
        (["dlq", "redrive", "--status", "redriven", "--until", "2100-01-01T00:00:00Z"], "alone still means"),
        (["dlq", "discard", "--reason", "x", "--since", "1970-01-01T00:00:00Z"], "say which dead letters"),
        (["dlq", "redrive", "--dry-run", "--status", "parked"], "say which dead letters"),
        (["dlq", "redrive", "--all", "--topic", "t"], "do not combine"),
        (["dlq", "redrive", "--topic", "t", "--definition", "latest"], "invalid choice"),
        (["dlq", "discard", "--all"], "required: --reason"),
        (["audit", "x", "--from", "now", "--to", "now-1h"], "must be after --from"),
        (["schedule", "trigger", "x", "--wait", "-1"], "--wait must not be negative"),
        (["schedule", "list", "--timeout", "0"], "--timeout must be positive"),
    ],
)
def test_bad_usage_exits_2_with_a_message_and_no_traceback(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err
    assert "Traceback" not in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for group in ("schedule", "workflow", "runs", "dlq", "audit", "replay", "stack"):
        assert group in out
    assert "Exit codes: 0 ok, 1 failed, 2 bad usage" in out


def test_global_options_work_before_and_after_the_subcommand() -> None:
    parser = build_parser()
    before = parser.parse_args(["--json", "--api-url", "http://a:1", "schedule", "list"])
    after = parser.parse_args(["schedule", "list", "--json", "--api-url", "http://a:1"])
    plain = parser.parse_args(["schedule", "list"])
    assert (before.json, before.api_url) == (after.json, after.api_url) == (True, "http://a:1")
    assert plain.json is False


def test_schedule_list_prints_a_table_and_points_at_the_next_page() -> None:
    failing = {
        "last_run": {"run_id": "hourly@x", "slot": "2026-12-02T01:00:00Z", "state": "dead_lettered"},
        "failure_streak": 3,
    }
    page = {
        "items": [
            SCHEDULE,
            {**SCHEDULE, "schedule_id": "hourly", "paused": True, "pause_reason": "bank", **failing},
        ]
    }
    code, out, err, requests = run(
        ["schedule", "list", "--tag", "money-moving", "--paused", "--limit", "2", "--id-prefix", "h"],
        reply({**page, "next_cursor": "c2"}),
    )
    assert code == 0
    lines = out.splitlines()
    header = ["SCHEDULE", "SPEC", "HANDLER", "STATE", "NEXT", "FIRE", "LAST", "RUN", "FAILING", "TAGS"]
    assert lines[0].split() == header
    assert "merchant-payouts  cron 0 2 * * * (Europe/Berlin)" in lines[1]
    assert "paused (bank)" in lines[2]
    assert "dead_lettered 2026-12-02T01:00:00Z  3 in a row" in lines[2]
    assert "--cursor c2" in err
    assert requests[0].url.params["id_prefix"] == "h"
    assert requests[0].url.params["tag"] == "money-moving"
    assert requests[0].url.params["paused"] == "true"
    assert requests[0].url.params["limit"] == "2"


def test_all_follows_cursors_and_json_is_one_document() -> None:
    def pages(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("cursor") == "p2":
            return httpx.Response(
                200, json={"items": [{**SCHEDULE, "schedule_id": "b"}], "next_cursor": None}
            )
        return httpx.Response(200, json={"items": [{**SCHEDULE, "schedule_id": "a"}], "next_cursor": "p2"})

    code, out, _, requests = run(["schedule", "list", "--all", "--json"], pages)
    assert code == 0
    body = json.loads(out)
    assert [item["schedule_id"] for item in body["items"]] == ["a", "b"]
    assert body["next_cursor"] is None
    assert len(requests) == 2


def test_show_prints_next_slots_and_404_is_a_failure_naming_the_schedule() -> None:
    detail = {**SCHEDULE, "next_slots": ["2026-12-03T01:00:00Z", "2026-12-04T01:00:00Z"]}
    code, out, _, _ = run(["schedule", "show", "merchant-payouts"], reply(detail))
    assert code == 0
    assert "handler:   payouts.pay_merchants" in out
    assert "next slots:\n  2026-12-03T01:00:00Z\n  2026-12-04T01:00:00Z" in out
    code, _, err, _ = run(["schedule", "show", "nope"], reply({"detail": "schedule nope not found"}, 404))
    assert (code, err) == (1, "slotflow: error: schedule nope not found\n")


def test_run_ids_are_escaped_as_one_path_segment() -> None:
    run_body = {
        "run_id": "merchant-payouts@2026-12-02T02:00:00Z",
        "state": "succeeded",
        "fence_token": 8,
        "attempts": [
            {"attempt": 1, "fence_token": 7, "owner": "claimer-1", "outcome": "failed", "error": "timeout"},
            {"attempt": 2, "fence_token": 8, "owner": "claimer-2", "outcome": "succeeded"},
        ],
    }
    code, out, _, requests = run(["runs", "show", "merchant-payouts@2026-12-02T02:00:00Z"], reply(run_body))
    assert code == 0
    assert requests[0].url.raw_path == b"/v1/runs/merchant-payouts%402026-12-02T02%3A00%3A00Z"
    assert "fence token: 8" in out
    assert "claimer-2" in out
    assert "timeout" in out


def test_runs_of_a_schedule_by_slot_range() -> None:
    code, out, _, requests = run(
        [
            "runs",
            "list",
            "--schedule",
            "s1",
            "--from",
            "2026-01-01T00:00:00Z",
            "--to",
            "2026-01-02T00:00:00Z",
        ],
        reply({"items": [], "next_cursor": None}),
    )
    assert code == 0
    assert out == "no runs\n"
    assert requests[0].url.path == "/v1/schedules/s1/runs"
    assert requests[0].url.params["from"] == "2026-01-01T00:00:00+00:00"


def test_unreachable_api_is_a_failure_that_says_where_and_what_to_do() -> None:
    code, out, err, _ = run(["--api-url", "http://127.0.0.1:9", "dlq", "list"], None)
    assert code == 1
    assert out == ""
    assert "cannot reach the slotflow API at http://127.0.0.1:9" in err
    assert "SLOTFLOW_API_URL" in err


def test_validation_errors_from_the_api_are_readable() -> None:
    detail = {"detail": [{"loc": ["query", "limit"], "msg": "Input should be less than or equal to 500"}]}
    code, _, err, _ = run(["workflow", "list"], reply(detail, 422))
    assert code == 1
    assert "limit: Input should be less than or equal to 500 (HTTP 422)" in err


def test_server_errors_are_failures_not_tracebacks() -> None:
    code, _, err, _ = run(["dlq", "show", "t:0:1"], lambda request: httpx.Response(500, text="boom"))
    assert code == 1
    assert "boom (HTTP 500)" in err
    assert "Traceback" not in err


AUDIT: dict[str, Any] = {
    "schedule_id": "s1",
    "from": "2026-01-01T00:00:00Z",
    "to": "2026-01-01T03:00:00Z",
    "expected": 3,
    "slots": [
        {
            "slot": "2026-01-01T00:00:00Z",
            "run_id": "s1@2026-01-01T00:00:00Z",
            "status": "fired",
            "detail": "",
        },
        {"slot": "2026-01-01T01:00:00Z", "run_id": None, "status": "missed", "detail": "no JobDue"},
        {
            "slot": "2026-01-01T02:00:00Z",
            "run_id": "s1@2026-01-01T02:00:00Z",
            "status": "late",
            "detail": "+90s",
        },
    ],
    "summary": {"fired": 1, "missed": 1, "skipped_by_policy": 0, "late": 1, "duplicated_effect": 0},
    "outcomes": {"succeeded": 1, "failed": 1, "in_flight": 0, "held": 0, "missed": 1, "skipped": 0},
}


def test_audit_prints_slots_and_summary_and_check_fails_on_missed_slots() -> None:
    argv = ["audit", "s1", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T03:00:00Z"]
    code, out, _, requests = run(argv, reply(AUDIT))
    assert code == 0
    assert "3 slots expected" in out
    assert "missed" in out
    assert "no JobDue" in out
    assert (
        "how they fired: fired=1  missed=1  skipped_by_policy=0  late=1  held=0  duplicated_effect=0" in out
    )
    # The headline counts outcomes: the late slot's run dead-lettered, so it is no success.
    assert (
        "outcomes: succeeded=1  failed=1  in_flight=0  held=0  missed=1  skipped=0  duplicated_effect=0"
        in out
    )
    assert requests[0].url.params["schedule"] == "s1"
    code, _, err, _ = run([*argv, "--check"], reply(AUDIT))
    assert code == 1
    assert "1 missed and 0 duplicated-effect" in err
    clean = {**AUDIT, "summary": {**AUDIT["summary"], "missed": 0}}
    assert run([*argv, "--check"], reply(clean))[0] == 0
    # Every slot fired, but a run's work dead-lettered: --check fails on that too.
    dead = {**clean, "dead_lettered": [{"run_id": "s1@2026-01-01T01:00:00Z", "slot": "2026-01-01T01:00:00Z"}]}
    code, _, err, _ = run([*argv, "--check"], reply(dead))
    assert code == 1
    assert "1 dead-lettered runs in the range" in err


def _entries(*events: HistoryEvent) -> list[dict[str, Any]]:
    """History entries as the API serves them (origin history, the event as data)."""
    return [
        {
            "entry_id": f"h/{e.workflow_id}#{e.sequence}",
            "at": "2026-03-01T12:00:00Z",
            "origin": "history",
            "type": e.message_type,
            "version": 1,
            "sequence": e.sequence,
            "data": e.model_dump(mode="json"),
        }
        for e in events
    ]


def _saga_history(*extra: HistoryEvent) -> list[dict[str, Any]]:
    return _entries(
        WorkflowStarted(
            workflow_id="w1", sequence=1, workflow_type="checkout", input={"o": 1}, command_id="c"
        ),
        ActivityScheduled(workflow_id="w1", sequence=2, activity="payments.charge", run_id="w1/2"),
        ActivityCompleted(workflow_id="w1", sequence=3, scheduled_sequence=2, result={"charge": "ch_1"}),
        CompensationRegistered(workflow_id="w1", sequence=4, for_step=2, activity="payments.refund"),
        TimerStarted(
            workflow_id="w1", sequence=5, timer_id="w1/t5", fire_at=datetime(2026, 3, 2, tzinfo=UTC)
        ),
        ActivityScheduled(workflow_id="w1", sequence=6, activity="shipping.book", run_id="w1/6"),
        ActivityFailed(
            workflow_id="w1", sequence=7, scheduled_sequence=6, error_type="NoCarrier", permanent=True
        ),
        ActivityScheduled(
            workflow_id="w1",
            sequence=8,
            activity="payments.refund",
            run_id="w1/8",
            compensation=True,
            compensates=2,
        ),
        *extra,
    )


def test_replay_plan_hands_back_recorded_results_by_sequence() -> None:
    plan = replay_plan({"workflow_id": "w1", "status": "compensating"}, _saga_history())
    rows = [
        (d["sequence"], d["decision"], d["name"], d["hands_back"], d["outcome_sequence"])
        for d in plan["decisions"]
    ]
    assert rows == [
        (1, "start", "checkout", 'input {"o":1}', None),
        (2, "activity", "payments.charge", 'result {"charge":"ch_1"}', 3),
        (4, "register undo", "payments.refund for #2", "recorded, runs on failure", None),
        (5, "sleep", "w1/t5", "still sleeping until 2026-03-02T00:00:00Z", None),
        (6, "activity", "shipping.book", "raises NoCarrier: ", 7),
        (
            8,
            "compensation",
            "payments.refund (undoes #2)",
            "nothing yet: the replay stops here and waits for the result",
            None,
        ),
    ]
    assert plan["last_sequence"] == 8
    assert (plan["non_determinism"], plan["code_checked"]) == (None, False)
    upsert = SearchAttributesUpserted(
        workflow_id="w1", sequence=9, search_attributes={"Stage": search_attribute("refunding")}
    )
    with_upsert = replay_plan({"workflow_id": "w1"}, _saga_history(upsert))
    assert with_upsert["decisions"][-1] == {
        "sequence": 9,
        "decision": "upsert search attributes",
        "name": "Stage",
        "hands_back": "recorded: the replay must upsert the same values",
        "outcome_sequence": None,
    }


def _api(history: list[dict[str, Any]]) -> Responder:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/history"):
            assert request.url.params["origin"] == "history"
            return httpx.Response(200, json={"items": history, "next_cursor": None})
        return httpx.Response(200, json={"workflow_id": "w1", "workflow_type": "checkout", "status": "stuck"})

    return answer


def test_replay_without_modules_flags_an_open_non_determinism_and_says_code_was_not_checked() -> None:
    diverged = NonDeterminismDetected(
        workflow_id="w1",
        sequence=9,
        at_sequence=6,
        expected="activity shipping.book",
        got="activity shipping.fast",
    )
    code, out, err, _ = run(["replay", "w1"], _api(_saga_history(diverged)))
    assert code == 1
    assert "raises NoCarrier" in out
    assert (
        "non-determinism (#9): at #6: expected activity shipping.book, got activity shipping.fast (OPEN"
        in out
    )
    assert "add --module MODULE to replay it against workflow code" in err
    assert "is stopped: its replay diverged at #6" in err
    # Something recorded after it: the workflow moved on, the divergence is history.
    later = ActivityCompleted(workflow_id="w1", sequence=10, scheduled_sequence=8)
    code, out, err, _ = run(["--json", "replay", "w1"], _api(_saga_history(diverged, later)))
    assert code == 0
    plan = json.loads(out)
    assert plan["non_determinism"]["open"] is False
    assert plan["decisions"][-1]["hands_back"] == "result null"


def test_history_lines_describe_typed_events() -> None:
    lines = [describe(entry) for entry in _saga_history()]
    assert lines[0] == 'started checkout input={"o":1} by command c'
    assert lines[3] == "to undo #2: payments.refund {}"
    assert lines[6] == "#6 failed: NoCarrier:  (permanent)"
    assert lines[7] == "schedule payments.refund (run w1/8), compensating #2"
    assert describe({"origin": "command", "type": "workflow.start", "data": {"a": 1}}) == '{"a":1}'
    upsert = {
        "origin": "history",
        "type": "workflow.search_attributes_upserted",
        "data": {"search_attributes": {"Stage": {"type": "keyword", "value": "paid"}, "Coupon": None}},
    }
    assert describe(upsert) == 'search attributes: Coupon=removed, Stage="paid"'


def test_workflow_show_prints_saga_state() -> None:
    body = {
        "workflow_id": "w1",
        "status": "failed",
        "error": {"type": "NoCarrier", "message": "none"},
        "compensated": True,
        "compensations": [
            {"for_step": 5, "step_activity": "payments.charge", "activity": "payments.refund", "state": "done",
             "registered_sequence": 7, "run_id": "w1/10", "error": None},
        ],
        "non_determinism": None,
        "anomalies": ["#15 workflow.activity_scheduled after the workflow ended"],
    }  # fmt: skip
    code, out, err, _ = run(["workflow", "show", "w1"], reply(body))
    assert code == 0
    assert "error:            NoCarrier: none" in out
    assert "compensated:      yes" in out
    assert "#5 payments.charge  payments.refund  done   7           w1/10" in out
    assert "history breaks the contract: #15" in err


def test_render_table_aligns_and_clips() -> None:
    rows: list[dict[str, Any]] = [{"a": "x", "b": "y" * 100}, {"a": "longer", "b": None}]
    table = render_table(rows, [("a", lambda r: str(r["a"])), ("b", lambda r: str(r["b"]))], max_width=10)
    assert table.splitlines() == ["A       B", "x       yyyyyyyyy…", "longer  None"]


def test_spec_text_for_each_kind() -> None:
    assert spec_text({"kind": "interval", "every": "PT15M"}) == "every 15m"
    assert spec_text({"kind": "interval", "every": 90.0}) == "every 1m30s"
    assert spec_text({"kind": "once", "at": "2026-01-01T00:00:00Z"}) == "once at 2026-01-01T00:00:00Z"


def test_dlq_selection_carries_every_filter_flag() -> None:
    from slotflow.cli.commanding import selection

    argv = [
        "dlq",
        "redrive",
        "--id",
        "a",
        "--id",
        "b",
        "--source",
        "claimer",
        "--topic",
        "t",
        "--failure-reason",
        "r",
    ]
    argv += [
        "--job",
        "j",
        "--run",
        "j@2026-01-01T00:00:00Z",
        "--status",
        "parked",
        "--since",
        "2026-01-01T00:00:00Z",
    ]
    chosen = selection(Context(build_parser().parse_args(argv)))
    assert chosen.ids == ("a", "b")
    assert (chosen.source_service, chosen.topic, chosen.reason, chosen.job_id) == ("claimer", "t", "r", "j")
    assert (chosen.run_id, chosen.status) == ("j@2026-01-01T00:00:00Z", "parked")
    assert chosen.since is not None
    assert chosen.until is None
