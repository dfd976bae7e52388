"""`workflow show|history` and `replay`: a workflow as its typed history (docs/workflows-history.md) makes it.

Everything here reads the api; the typed events are read from the history entries' JSON (tolerant:
a field an older server does not send prints as `-`), never by importing the api.
"""

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from slotflow.cli.api import ApiClient, path_segment
from slotflow.cli.context import Context
from slotflow.cli.errors import ApiRequestFailed, CliError
from slotflow.cli.output import (
    COMPENSATION_COLUMNS,
    HISTORY_COLUMNS,
    PENDING_ACTIVITY_COLUMNS,
    TIMER_COLUMNS,
    Column,
    field,
    text,
)
from slotflow.cli.values import parse_json_value
from slotflow.contracts import REGISTRY, HistoryEvent
from slotflow.errors import SlotflowError
from slotflow.history import Recorded, fold

MAX_LIMIT = 500
_PREFIX = "workflow."
#: History events that answer an earlier decision (by its sequence).
_OUTCOMES = ("workflow.activity_completed", "workflow.activity_failed", "workflow.timer_fired")
#: Said by `replay` without --module: this is what the history holds, not a check of any code.
CODE_NOT_CHECKED = "replay from recorded history only: add --module MODULE to replay it against workflow code"


class NonDeterminismOpen(CliError):
    """`replay` found the workflow stopped by an open NonDeterminismDetected."""


def _workflow(ctx: Context, api: ApiClient) -> Any:
    workflow_id = ctx.args.workflow_id
    try:
        return api.get(f"/v1/workflows/{path_segment(workflow_id)}")
    except ApiRequestFailed as err:
        if err.status == 404:
            raise CliError(f"workflow {workflow_id} not found") from None
        raise


def _history(ctx: Context, api: ApiClient, origin: str | None = None) -> list[dict[str, Any]]:
    """Every history entry of the workflow (of one origin, if given), oldest first, all pages."""
    workflow_id = ctx.args.workflow_id
    items: list[dict[str, Any]] = []
    try:
        for page in api.pages(
            f"/v1/workflows/{path_segment(workflow_id)}/history",
            {"limit": MAX_LIMIT, "origin": origin},
            follow=True,
        ):
            items.extend(item for item in page.get("items", []) if isinstance(item, dict))
    except ApiRequestFailed as err:
        if err.status == 404:
            raise CliError(f"workflow {workflow_id} not found") from None
        raise
    return items


def _j(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def describe(entry: Mapping[str, Any]) -> str:
    """One line for a history entry: typed history events in words, anything else as its data."""
    kind = str(entry.get("type") or "")
    d: Mapping[str, Any] = entry.get("data") or {}
    if entry.get("origin") not in (None, "history") or not kind.startswith(_PREFIX):
        return text(d)
    name = kind.removeprefix(_PREFIX)
    if name == "started":
        return f"started {d.get('workflow_type')} input={_j(d.get('input'))} by command {d.get('command_id')}"
    if name == "activity_scheduled":
        line = f"schedule {d.get('activity')} (run {d.get('run_id')})"
        return line + (f", compensating #{d['compensates']}" if d.get("compensates") else "")
    if name == "activity_completed":
        return f"#{d.get('scheduled_sequence')} completed: {_j(d.get('result'))}"
    if name == "activity_failed":
        permanent = " (permanent)" if d.get("permanent") else " (out of attempts)"
        return f"#{d.get('scheduled_sequence')} failed: {d.get('error_type')}: {d.get('message')}{permanent}"
    if name == "timer_started":
        return f"timer {d.get('timer_id')} until {d.get('fire_at')}"
    if name == "timer_fired":
        return f"timer #{d.get('started_sequence')} fired at {d.get('fired_at')}"
    if name == "signal_received":
        return f"signal {d.get('signal')} {_j(d.get('payload'))}"
    if name == "compensation_registered":
        return f"to undo #{d.get('for_step')}: {d.get('activity')} {_j(d.get('payload'))}"
    if name == "cancel_requested":
        return f"cancel requested: {d.get('reason') or '-'}"
    if name == "completed":
        return f"completed: {_j(d.get('result'))}"
    if name in ("failed", "cancelled"):
        what = f"{d.get('error_type')}: {d.get('message')}" if name == "failed" else d.get("reason") or "-"
        return f"{name}: {what} ({'compensated' if d.get('compensated') else 'not compensated'})"
    if name == "non_determinism_detected":
        return f"NON-DETERMINISM at #{d.get('at_sequence')}: expected {d.get('expected')}, got {d.get('got')}"
    if name == "search_attributes_upserted":
        return "search attributes: " + ", ".join(
            f"{key}={_j(value.get('value')) if isinstance(value, Mapping) else 'removed'}"
            for key, value in sorted((d.get("search_attributes") or {}).items())
        )
    if name == "memo_upserted":
        return "memo: " + ", ".join(
            f"{key}={_j(value) if value is not None else 'removed'}"
            for key, value in sorted((d.get("memo") or {}).items())
        )
    return text(d)


TYPED_HISTORY_COLUMNS: Sequence[Column] = (
    ("seq", field("sequence")),
    ("at", field("at")),
    ("origin", field("origin")),
    ("event", field("type")),
    ("detail", describe),
)


def workflow_query(ctx: Context) -> int:
    """`workflow query WORKFLOW_ID QUERY`: ask the workflow's query handler; print its answer."""
    a = ctx.args
    body: dict[str, Any] = {"query": a.query}
    if a.arg is not None:
        body["arg"] = parse_json_value(a.arg, flag="--arg")
    if a.start_command_id is not None:
        body["start_command_id"] = a.start_command_id
    with ctx.api() as api:
        try:
            answer = api.request(
                "POST",
                f"/v1/workflows/{path_segment(a.workflow_id)}/query",
                json=body,
                timeout=ctx.timeout + 15,
            )
        except ApiRequestFailed as err:
            raise CliError(f"query {a.query!r} of workflow {a.workflow_id}: {err.detail}") from None
    if ctx.as_json:
        ctx.emit_json(answer)
    else:
        ctx.out.write(json.dumps(answer.get("result"), indent=2, sort_keys=True) + "\n")
    return 0


def workflow_show(ctx: Context) -> int:
    """`workflow show`: one workflow's state as its history makes it."""
    with ctx.api() as api:
        body = _workflow(ctx, api)
    if ctx.as_json:
        ctx.emit_json(body)
        return 0
    pairs = [
        (label, text(body.get(name)))
        for label, name in (
            ("workflow", "workflow_id"),
            ("type", "workflow_type"),
            ("status", "status"),
            ("current step", "current_step"),
            ("last sequence", "last_sequence"),
            ("requested", "requested_at"),
            ("started", "started_at"),
            ("ended", "ended_at"),
            ("updated", "updated_at"),
            ("cancel requested", "cancel_requested"),
            ("history events", "history_length"),
        )
    ]
    if body.get("memo"):
        pairs.append(("memo", _j(body["memo"])))
    for name, attribute in sorted((body.get("search_attributes") or {}).items()):
        if isinstance(attribute, Mapping):
            pairs.append((f"search {name}", f"{_j(attribute.get('value'))} ({attribute.get('type')})"))
    if body.get("error"):
        error = body["error"]
        pairs.append(("error", f"{error.get('type')}: {error.get('message')}"))
    if body.get("result") is not None:
        pairs.append(("result", text(body["result"])))
    if body.get("compensated") is not None:
        pairs.append(("compensated", text(body["compensated"])))
    divergence = body.get("non_determinism")
    if isinstance(divergence, Mapping):
        pairs.append(("non-determinism", _divergence(divergence)))
    if body.get("gap_at"):
        pairs.append(("waiting for", f"history event #{body['gap_at']} (later ones arrived first)"))
    if body.get("waiting"):
        pairs.append(("waiting", str(body["waiting"])))
        for action in body.get("actions") or ():
            if action.get("action") == "retry_activity":
                pairs.append(
                    (
                        "retry with",
                        f"slotflow workflow retry-activity {body['workflow_id']} {action['sequence']}",
                    )
                )
    ctx.emit_fields(pairs)
    for title, key, columns in (
        ("pending activities", "pending_activities", PENDING_ACTIVITY_COLUMNS),
        ("pending timers", "pending_timers", TIMER_COLUMNS),
        ("compensations, in the order they run (newest first)", "compensations", COMPENSATION_COLUMNS),
    ):
        rows = [row for row in body.get(key) or [] if isinstance(row, dict)]
        ctx.out.write(f"\n{title}:\n")
        ctx.emit_table(rows, columns, empty="  none")
    for anomaly in body.get("anomalies") or []:
        ctx.note(f"history breaks the contract: {anomaly}")
    return 0


def _divergence(d: Mapping[str, Any]) -> str:
    state = "OPEN, the workflow is stopped" if d.get("open") else "resolved"
    return f"at #{d.get('at_sequence')}: expected {d.get('expected')}, got {d.get('got')} ({state})"


def workflow_history(ctx: Context) -> int:
    """`workflow history`: a workflow's history entries, of one origin if given."""
    with ctx.api() as api:
        items = _history(ctx, api, getattr(ctx.args, "origin", None))
    if ctx.as_json:
        ctx.emit_json({"items": items})
        return 0
    ctx.emit_table(items, TYPED_HISTORY_COLUMNS if items else HISTORY_COLUMNS, empty="no history recorded")
    return 0


def replay_plan(workflow: Mapping[str, Any], history: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What a replay of the typed history hands back to the code, decision by decision.

    Which result (an activity's completion or failure, a timer's firing) answers which decision,
    and whether a NonDeterminismDetected is still open, is the library's history fold
    (`slotflow.history`), the one the api derives a workflow's state with; the rows show the
    recorded entries' own values.
    """
    events = sorted(
        (
            e
            for e in history
            if e.get("origin") in (None, "history")
            and str(e.get("type") or "").startswith(_PREFIX)
            and isinstance(e.get("sequence"), int)
        ),
        key=lambda e: int(e["sequence"]),
    )
    by_sequence: dict[int, Mapping[str, Any]] = {}
    for e in events:
        by_sequence.setdefault(int(e["sequence"]), e)
    state = fold([r for r in map(_recorded, by_sequence.values()) if r is not None])
    answered: dict[int, Any] = {}
    divergence: dict[str, Any] | None = None
    if state is not None:
        answered.update((s["sequence"], s["finished_sequence"]) for s in state.steps)
        answered.update((t["sequence"], t["fired_sequence"]) for t in state.timers)
        if state.non_determinism is not None:
            found = state.non_determinism
            divergence = {
                name: found[name] for name in ("at_sequence", "expected", "got", "sequence", "open")
            }
    decisions: list[dict[str, Any]] = []
    for e in events:
        seq, kind, d = int(e["sequence"]), str(e["type"]).removeprefix(_PREFIX), e.get("data") or {}
        answer = answered.get(seq)
        row = _decision(seq, kind, d, by_sequence.get(answer) if answer is not None else None)
        if row is not None:
            decisions.append(row)
    return {
        "workflow_id": workflow.get("workflow_id"),
        "workflow_type": workflow.get("workflow_type"),
        "status": workflow.get("status"),
        "last_sequence": events[-1]["sequence"] if events else None,
        "decisions": decisions,
        "non_determinism": divergence,
        "code_checked": False,
        "note": CODE_NOT_CHECKED,
    }


def _recorded(entry: Mapping[str, Any]) -> Recorded | None:
    """A history entry as the fold takes it; None when this client does not know its type or it
    does not validate (the row still shows, unanswered)."""
    try:
        model = REGISTRY.model_for(str(entry["type"]), int(entry.get("version") or 1))
        event = model.model_validate(entry.get("data") or {})
        at = datetime.fromisoformat(str(entry.get("at")))
    except (SlotflowError, ValidationError, ValueError, TypeError):
        return None
    return Recorded(event, at) if isinstance(event, HistoryEvent) else None


def _decision(
    seq: int, kind: str, d: Mapping[str, Any], outcome: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    found = outcome.get("data") or {} if outcome is not None else {}
    at = outcome.get("sequence") if outcome is not None else None
    if kind == "started":
        return _row(seq, "start", d.get("workflow_type"), f"input {_j(d.get('input'))}")
    if kind == "activity_scheduled":
        name = str(d.get("activity"))
        if d.get("compensates"):
            name += f" (undoes #{d['compensates']})"
        if outcome is None:
            back = "nothing yet: the replay stops here and waits for the result"
        elif outcome.get("type") == "workflow.activity_completed":
            back = f"result {_j(found.get('result'))}"
        else:
            back = f"raises {found.get('error_type')}: {found.get('message')}"
        return _row(seq, "compensation" if d.get("compensates") else "activity", name, back, at)
    if kind == "timer_started":
        back = (
            f"fired at {found.get('fired_at')}"
            if outcome is not None
            else f"still sleeping until {d.get('fire_at')}"
        )
        return _row(seq, "sleep", d.get("timer_id"), back, at)
    if kind == "signal_received":
        return _row(seq, "signal", d.get("signal"), f"payload {_j(d.get('payload'))}")
    if kind == "compensation_registered":
        return _row(
            seq, "register undo", f"{d.get('activity')} for #{d.get('for_step')}", "recorded, runs on failure"
        )
    if kind == "cancel_requested":
        return _row(seq, "cancel", d.get("reason") or "-", "the cancellation is delivered")
    if kind == "search_attributes_upserted":
        names = ", ".join(sorted(d.get("search_attributes") or {}))
        return _row(
            seq, "upsert search attributes", names, "recorded: the replay must upsert the same values"
        )
    if kind == "memo_upserted":
        names = ", ".join(sorted(d.get("memo") or {}))
        return _row(seq, "upsert memo", names, "recorded: the replay must upsert the same values")
    if kind in ("completed", "failed", "cancelled"):
        if kind == "completed":
            back = f"returned {_j(d.get('result'))}"
        elif kind == "failed":
            back = f"raised {d.get('error_type')}: {d.get('message')}"
        else:
            back = "cancelled"
        suffix = (
            ""
            if kind == "completed"
            else (" (compensated)" if d.get("compensated") else " (not compensated)")
        )
        return _row(seq, "end", kind, back + suffix)
    return None


def _row(seq: int, decision: str, name: Any, back: str, outcome_sequence: Any = None) -> dict[str, Any]:
    return {
        "sequence": seq,
        "decision": decision,
        "name": text(name),
        "hands_back": back,
        "outcome_sequence": outcome_sequence,
    }


DECISION_COLUMNS: Sequence[Column] = (
    ("seq", field("sequence")),
    ("decision", field("decision")),
    ("what", field("name")),
    ("replay hands back", field("hands_back")),
    ("from", lambda row: f"#{row['outcome_sequence']}" if row.get("outcome_sequence") else "-"),
)


def replay(ctx: Context) -> int:
    """`replay WORKFLOW_ID` without --module: what a replay hands back, decision by decision."""
    with ctx.api() as api:
        workflow = _workflow(ctx, api)
        history = _history(ctx, api, "history")
    plan = replay_plan(workflow, history)
    divergence = plan["non_determinism"]
    if ctx.as_json:
        ctx.emit_json(plan)
    else:
        ctx.emit_fields(
            [
                ("workflow", text(plan["workflow_id"])),
                ("type", text(plan["workflow_type"])),
                ("status", text(plan["status"])),
                ("last sequence", text(plan["last_sequence"])),
            ]
        )
        ctx.out.write("\n")
        ctx.emit_table(plan["decisions"], DECISION_COLUMNS, empty="no typed history recorded yet")
        if divergence is not None:
            ctx.out.write(f"\nnon-determinism (#{divergence['sequence']}): {_divergence(divergence)}\n")
    ctx.note(CODE_NOT_CHECKED)
    if divergence is not None and divergence["open"]:
        raise NonDeterminismOpen(
            f"workflow {plan['workflow_id']} is stopped: its replay diverged at #{divergence['at_sequence']} "
            f"(expected {divergence['expected']}, got {divergence['got']}); deploy code that matches its history"
        )
    return 0
