"""`slotflow downstream list|show|open|close|configure`: the breakers of the claimers' downstreams.

Views read the api (what the claimers last reported); open, close and configure publish the
commands the claimers apply and answer (`--wait` asks the api for the answer).
"""

from collections.abc import Mapping, Sequence
from typing import Any

from slotflow.cli.api import path_segment
from slotflow.cli.commanding import send
from slotflow.cli.context import Context
from slotflow.cli.errors import ApiRequestFailed, CliError
from slotflow.cli.output import Column, field, text
from slotflow.cli.parsing import validated
from slotflow.contracts import CloseDownstream, ConfigureDownstream, OpenDownstream


def _budget(row: Mapping[str, Any]) -> str:
    used, allowance = row.get("retries"), row.get("retry_allowance")
    if used is None or allowance is None:
        return text(None)
    return f"{used}/{allowance}"


DOWNSTREAM_COLUMNS: Sequence[Column] = (
    ("downstream", field("name")),
    ("circuit", lambda row: f"{row.get('state')}{' (operator)' if row.get('manual') else ''}"),
    ("retries/budget", _budget),
    ("calls ok/failed", lambda row: f"{text(row.get('successes'))}/{text(row.get('failures'))}"),
    ("held runs", field("held")),
    ("changed", field("changed_at")),
)
CHANGE_COLUMNS: Sequence[Column] = (
    ("at", field("at")),
    ("change", lambda row: f"{row.get('from_state')} -> {row.get('to_state')}"),
    ("cause", field("cause")),
    ("by", field("by_claimer")),
    ("reason", field("reason")),
)
HELD_COLUMNS: Sequence[Column] = (
    ("run", field("run_id")),
    ("slot", field("slot")),
    ("reason", field("held_reason")),
    ("next try", field("retry_at")),
)


def downstream_list(ctx: Context) -> int:
    with ctx.api() as api:
        rows = api.get("/v1/downstreams")
    if ctx.as_json:
        ctx.emit_json(rows)
        return 0
    ctx.emit_table(
        list(rows), DOWNSTREAM_COLUMNS, empty="no downstreams reported (no handler declared one yet)"
    )
    return 0


def downstream_show(ctx: Context) -> int:
    name = ctx.args.name
    with ctx.api() as api:
        try:
            body = api.get(f"/v1/downstreams/{path_segment(name)}")
        except ApiRequestFailed as err:
            if err.status == 404:
                raise CliError(f"downstream {name} not found (no claimer has reported it yet)") from None
            raise
    if ctx.as_json:
        ctx.emit_json(body)
        return 0
    ctx.emit_fields(
        (key.replace("_", " "), text(value))
        for key, value in body.items()
        if key not in ("changes", "held_runs")
    )
    ctx.out.write(f"\nheld runs ({body.get('held', 0)}; the first 100 in slot order):\n")
    ctx.emit_table(body.get("held_runs", []), HELD_COLUMNS, empty="none")
    ctx.out.write("\nchanges (newest first):\n")
    ctx.emit_table(body.get("changes", []), CHANGE_COLUMNS, empty="none")
    return 0


def downstream_open(ctx: Context) -> int:
    fields = {"downstream": ctx.args.name, "reason": ctx.args.reason}
    return send(ctx, validated(OpenDownstream, fields, what="open"))


def downstream_close(ctx: Context) -> int:
    fields = {"downstream": ctx.args.name, "reason": ctx.args.reason}
    return send(ctx, validated(CloseDownstream, fields, what="close"))


def downstream_configure(ctx: Context) -> int:
    a = ctx.args
    settings = {
        "retry_ratio": a.retry_ratio,
        "min_retries_per_second": a.min_retries_per_second,
        "window_seconds": a.window_seconds,
        "failure_rate": a.failure_rate,
        "min_volume": a.min_volume,
        "cooldown_seconds": a.cooldown_seconds,
        "probes": a.probes,
    }
    fields = {"downstream": a.name, "settings": {k: v for k, v in settings.items() if v is not None}}
    return send(ctx, validated(ConfigureDownstream, fields, what="settings"))
