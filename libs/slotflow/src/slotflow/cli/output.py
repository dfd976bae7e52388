"""How results are printed: aligned plain-text tables for people, `--json` for programs.

The API's JSON is the source of truth; these functions only choose columns and shorten values,
and they tolerate missing fields (a column shows `-`) so an older server still prints.
"""

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TextIO

from pydantic import TypeAdapter, ValidationError

from slotflow.cli.values import format_duration

Row = Mapping[str, Any]
Column = tuple[str, Callable[[Row], str]]
MISSING = "-"
_TIMEDELTA = TypeAdapter(timedelta)


def dump_json(value: Any, out: TextIO) -> None:
    """Pretty JSON with a trailing newline (stable key order as the server sent it)."""
    out.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


def render_table(rows: Sequence[Row], columns: Sequence[Column], *, max_width: int = 60) -> str:
    """Left-aligned columns separated by two spaces, headers in capitals; cells cut at ``max_width``."""
    header = [name.upper() for name, _ in columns]
    body = [[_clip(cell(row), max_width) for _, cell in columns] for row in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(columns))]
    lines = [
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        for line in [header, *body]
    ]
    return "\n".join(lines) + "\n"


def render_fields(pairs: Iterable[tuple[str, str]]) -> str:
    """`label: value` lines with the values aligned."""
    items = list(pairs)
    width = max((len(label) for label, _ in items), default=0)
    return "".join(f"{(label + ':').ljust(width + 1)} {value}\n" for label, value in items)


def _clip(text: str, width: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def text(value: Any) -> str:
    """A cell: `-` for nothing, compact JSON for structures, the string otherwise."""
    if value is None or value == "" or value == [] or value == {}:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(text(item) for item in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return str(value)


def lookup(row: Row, path: str) -> Any:
    """``row["a"]["b"]`` for ``"a.b"``; None where any step is missing."""
    value: Any = row
    for key in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def field(name: str, *fallbacks: str) -> Callable[[Row], str]:
    """A cell reading ``name`` (or the first present fallback; dotted paths reach inside) from the row."""

    def cell(row: Row) -> str:
        for key in (name, *fallbacks):
            value = lookup(row, key)
            if value is not None:
                return text(value)
        return MISSING

    return cell


def error_text(error: Any) -> str:
    """A recorded error as `Type: message` (the API stores errors as objects)."""
    if isinstance(error, Mapping):
        kind = error.get("error_type") or error.get("type")
        message = error.get("message") or error.get("error")
        if kind or message:
            return f"{kind}: {message}" if kind and message else str(kind or message)
    return text(error)


def duration_text(value: Any) -> str:
    """A pydantic-serialised timedelta (ISO 8601 or seconds) as `1h30m`."""
    if value is None:
        return MISSING
    try:
        return format_duration(_TIMEDELTA.validate_python(value))
    except ValidationError:
        return str(value)


def spec_text(spec: Any) -> str:
    """`cron 0 2 * * * (Europe/Berlin)`, `every 15m`, `once at 2026-…`."""
    if not isinstance(spec, Mapping):
        return text(spec)
    kind = spec.get("kind")
    if kind == "cron":
        zone = spec.get("timezone") or "UTC"
        return f"cron {spec.get('expression')} ({zone})"
    if kind == "interval":
        return f"every {duration_text(spec.get('every'))}"
    if kind == "once":
        return f"once at {spec.get('at')}"
    return text(spec)


def schedule_state(row: Row) -> str:
    """`active`, `finished`, `deleted`, or `paused (reason) until <resume_at>`."""
    status = row.get("status")
    if row.get("deleted"):
        return "deleted"
    if row.get("paused"):
        reason = row.get("pause_reason")
        out = f"paused ({reason})" if reason else "paused"
        resume_at = row.get("resume_at")
        return f"{out} until {resume_at}" if resume_at else out
    return status if isinstance(status, str) else "active"


def last_run_text(row: Row) -> str:
    """The newest run's state and slot, e.g. `dead_lettered 2026-12-02T02:00:00Z`."""
    last = row.get("last_run")
    if not isinstance(last, Mapping):
        return MISSING
    return f"{text(last.get('state'))} {text(last.get('slot'))}"


def failing_text(row: Row) -> str:
    """The failure streak: `-` when healthy, else how many runs in a row ended in failure."""
    streak = row.get("failure_streak")
    return f"{streak} in a row" if isinstance(streak, int) and streak > 0 else MISSING


SCHEDULE_COLUMNS: Sequence[Column] = (
    ("schedule", field("schedule_id")),
    ("spec", lambda row: spec_text(row.get("spec"))),
    ("handler", field("handler")),
    ("state", schedule_state),
    ("next fire", field("next_fire_at")),
    ("last run", last_run_text),
    ("failing", failing_text),
    ("tags", field("tags")),
)

RUN_COLUMNS: Sequence[Column] = (
    ("run", field("run_id")),
    ("slot", field("slot")),
    ("state", field("state", "outcome")),
    (
        "attempts",
        lambda row: (
            text(len(row["attempts"])) if isinstance(row.get("attempts"), list) else field("attempt")(row)
        ),
    ),
    ("fence", field("fence_token")),
    ("owner", field("owner")),
    ("started", field("timings.started_at", "started_at")),
    ("finished", field("timings.finished_at", "finished_at")),
)

ATTEMPT_COLUMNS: Sequence[Column] = (
    ("attempt", field("attempt")),
    ("fence", field("fence_token")),
    ("owner", field("owner")),
    ("started", field("started_at")),
    ("finished", field("finished_at")),
    ("outcome", field("outcome")),
    ("error", lambda row: error_text(row.get("error"))),
)

WORKFLOW_COLUMNS: Sequence[Column] = (
    ("workflow", field("workflow_id")),
    ("type", field("workflow_type", "type")),
    ("status", field("status")),
    ("current step", field("current_step")),
    ("waiting since", field("waiting_since")),
    ("requested", field("requested_at", "started_at")),
    ("updated", field("updated_at")),
)

HISTORY_COLUMNS: Sequence[Column] = (
    ("seq", field("sequence", "seq")),
    ("at", field("at", "occurred_at")),
    ("origin", field("origin")),
    ("event", field("type", "event_type", "kind")),
    ("detail", lambda row: text(row.get("detail") or row.get("data") or row.get("payload"))),
)

DLQ_COLUMNS: Sequence[Column] = (
    ("id", field("dead_letter_id", "id")),
    ("status", field("status")),
    ("reason", field("reason")),
    ("source", field("source_service", "source")),
    ("topic", field("topic")),
    ("job", field("job_id")),
    (
        "error",
        lambda row: ": ".join(str(p) for p in (row.get("error_type"), row.get("error")) if p) or MISSING,
    ),
    # Who was asked to redrive it and what they answered, or the discard reason.
    ("note", field("note")),
)


def _owner(row: Row) -> str:
    """Where a redrive would send the letter, or why it cannot."""
    if row.get("refusal"):
        return f"refused: {row['refusal']}"
    return str(row.get("owner") or MISSING)


#: A dry run's first letters: where a redrive would send each, or why it cannot.
PREVIEW_COLUMNS: Sequence[Column] = (
    ("id", field("dead_letter_id", "id")),
    ("status", field("status")),
    ("reason", field("reason")),
    ("source", field("source_service", "source")),
    ("owner", _owner),
)

#: A repair's slots: what it does to each (`action`), or why it leaves it out (`reason`).
REPAIR_COLUMNS: Sequence[Column] = (
    ("slot", field("slot")),
    ("state", field("state")),
    ("run", field("run_id")),
    ("action", lambda row: str(row.get("action") or row.get("reason") or MISSING)),
)

BULK_WORKFLOW_COLUMNS: Sequence[Column] = (
    ("workflow", field("workflow_id")),
    ("type", field("workflow_type")),
    ("status", field("status")),
    ("command", field("command_id")),
)

BULK_LEFT_OUT_COLUMNS: Sequence[Column] = (
    ("workflow", field("workflow_id")),
    ("status", field("status")),
    ("why", field("reason")),
)

PENDING_ACTIVITY_COLUMNS: Sequence[Column] = (
    ("seq", field("sequence")),
    ("activity", field("handler")),
    ("state", field("state")),
    ("attempt", field("attempt")),
    ("run", field("run_id")),
)

TIMER_COLUMNS: Sequence[Column] = (
    ("timer", field("timer_id")),
    ("fires at", field("fire_at")),
    ("status", field("status")),
)

COMPENSATION_COLUMNS: Sequence[Column] = (
    (
        "undoes",
        lambda row: (
            f"#{row['for_step']} {text(row.get('step_activity'))}" if row.get("for_step") else MISSING
        ),
    ),
    ("compensation", field("activity")),
    ("state", field("state")),
    ("registered", field("registered_sequence")),
    ("run", field("run_id")),
    ("error", lambda row: error_text(row.get("error")) if row.get("error") else MISSING),
)

AUDIT_COLUMNS: Sequence[Column] = (
    ("slot", field("slot")),
    ("outcome", field("outcome")),
    ("status", field("status")),
    ("kind", field("kind")),
    ("run", field("run_id")),
    ("detail", field("detail")),
)

UNSCHEDULED_COLUMNS: Sequence[Column] = (
    ("slot", field("slot")),
    ("kind", field("kind")),
    ("state", field("state")),
    ("run", field("run_id")),
)
