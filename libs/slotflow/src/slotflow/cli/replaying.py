"""`replay`: replay recorded workflow histories against the current code, before deploying it.

Histories come from a JSON file, the workflow-history topic (filtered by workflow type or id), or
the read-model API (one workflow id). Each is checked as a history first (gap-free from sequence
1, a WorkflowStarted first, nothing after the end), then every run of it is replayed through
`slotflow.workflow.Replayer` against the workflow classes of the modules named with `--module`
(imported like a claimer imports its handler modules). The first mismatch prints its diff
(sequence, what the history recorded, what the code did) and exits 1.

Without `--module`, `replay WORKFLOW_ID` lists what a replay hands back (`slotflow.cli.workflows`).
"""

import importlib
import itertools
import json
import pkgutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import ValidationError

from slotflow.cli.context import Context
from slotflow.cli.errors import CliError, UsageError
from slotflow.cli.output import text
from slotflow.cli.values import explain
from slotflow.contracts import REGISTRY, HistoryEvent, NonDeterminismDetected, WorkflowStarted
from slotflow.errors import SlotflowError

if TYPE_CHECKING:
    from slotflow.workflow import Replayer


class ReplayMismatch(CliError):
    """The code took another path than a recorded history: deploying it would stop that workflow."""


class BadHistory(CliError):
    """A history breaks the contract (a gap, no start, events after the end), or cannot be read."""


@dataclass
class History:
    """One workflow's recorded events, in sequence order."""

    workflow_id: str
    events: list[HistoryEvent] = field(default_factory=list)

    @property
    def workflow_type(self) -> str:
        starts = [e for e in self.events if isinstance(e, WorkflowStarted)]
        return starts[-1].workflow_type if starts else "?"

    @property
    def types(self) -> set[str]:
        return {e.workflow_type for e in self.events if isinstance(e, WorkflowStarted)}


def replay(ctx: Context) -> int:
    """`replay`: replay recorded histories against the code of --module (or list one without it)."""
    a = ctx.args
    chosen = [
        name
        for name, given in (("WORKFLOW_ID", a.workflow_id), ("--file", a.file), ("--topic", a.topic))
        if given
    ]
    if len(chosen) != 1:
        raise UsageError(
            "name exactly one history source: WORKFLOW_ID (from the API), --file PATH or --topic"
            + (f" (got {' and '.join(chosen)})" if chosen else "")
        )
    modules = [m.strip() for value in a.modules or () for m in value.split(",") if m.strip()]
    if not modules:
        if a.workflow_id is None:
            raise UsageError(
                "replaying a --file or --topic checks code: name its modules with --module MODULE"
            )
        from slotflow.cli.workflows import replay as listing

        return listing(ctx)
    histories = _select(_load(ctx), set(a.workflow_types or ()), set(a.workflow_ids or ()))
    if not histories:
        raise CliError("no recorded history matches: nothing was replayed")
    histories = _resolve_payloads(ctx, histories)
    replayer, known = _replayer(modules)
    return _replay_all(ctx, replayer, known, modules, histories)


# -- reading histories ---------------------------------------------------------------------------


def _load(ctx: Context) -> list[History]:
    a = ctx.args
    if a.file is not None:
        return group(parse_entries(_read_json(a.file), where=a.file))
    if a.topic:
        return _from_topic(ctx)
    from slotflow.cli.workflows import _history

    with ctx.api() as api:
        items = _history(ctx, api, "history")
    if not items:
        raise CliError(f"workflow {a.workflow_id} has no typed history recorded yet")
    return group(parse_entries(items, where=f"the API's history of {a.workflow_id}"))


def _read_json(path: str) -> Any:
    try:
        raw = Path(path).read_text(encoding="utf-8") if path != "-" else sys.stdin.read()
    except OSError as err:
        raise UsageError(f"cannot read history file {path}: {err.strerror or err}") from None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        pass
    # JSON lines: one envelope or entry per line (a topic dump).
    entries = []
    for number, line in enumerate(raw.splitlines(), 1):
        if line.strip():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise UsageError(
                    f"{path}:{number}: not JSON ({err.msg}); give a JSON document or JSON lines"
                ) from None
    return entries


def parse_entries(document: Any, *, where: str) -> list[HistoryEvent]:
    """History events from what a file holds: a list of envelopes (`{"type", "version", "data"}`)
    or of API history entries (`workflow history --json`), bare or under `items`, `events` or
    `histories` (a list of lists). Entries that are not history events (commands, other origins)
    are left out.

    Raises:
        BadHistory: an entry names a history event whose data does not validate.
    """
    if isinstance(document, Mapping):
        for key in ("items", "events", "histories"):
            if key in document:
                return parse_entries(document[key], where=where)
        document = [document]
    if not isinstance(document, list):
        raise BadHistory(f"{where}: expected a list of history events, found {type(document).__name__}")
    events: list[HistoryEvent] = []
    for index, entry in enumerate(document):
        if isinstance(entry, list):
            events.extend(parse_entries(entry, where=where))
            continue
        event = _event(entry, f"{where}, entry {index}")
        if event is not None:
            events.append(event)
    return events


def _event(entry: Any, where: str) -> HistoryEvent | None:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("type"), str):
        raise BadHistory(f"{where}: not an envelope or history entry (needs 'type' and 'data')")
    if entry.get("origin") not in (None, "history") or not isinstance(entry.get("data"), Mapping):
        return None
    try:
        model = REGISTRY.model_for(entry["type"], int(entry.get("version") or 1))
    except SlotflowError:
        if str(entry["type"]).startswith("workflow."):
            raise BadHistory(f"{where}: unknown history event type {entry['type']!r}") from None
        return None
    if not issubclass(model, HistoryEvent):
        return None
    try:
        return model.model_validate(entry["data"])
    except ValidationError as err:
        raise BadHistory(f"{where}: invalid {entry['type']}: {explain(err)}") from None


def group(events: Iterable[HistoryEvent]) -> list[History]:
    """Events by workflow id (in the order ids first appear), each in sequence order.

    The same sequence twice (an append retried) counts once when both are equal; two different
    events at one sequence break the contract.

    Raises:
        BadHistory: two different events share a sequence.
    """
    by_id: dict[str, dict[int, HistoryEvent]] = {}
    for event in events:
        seen = by_id.setdefault(event.workflow_id, {})
        earlier = seen.setdefault(event.sequence, event)
        if earlier != event:
            raise BadHistory(
                f"workflow {event.workflow_id}: two different events at sequence {event.sequence} "
                f"({earlier.message_type} and {event.message_type})"
            )
    return [History(wid, [seen[s] for s in sorted(seen)]) for wid, seen in by_id.items()]


def _from_topic(ctx: Context) -> list[History]:
    import asyncio

    from slotflow.contracts.codec import decode
    from slotflow.contracts.topics import WORKFLOW_HISTORY
    from slotflow.kafka.reading import read_to_end
    from slotflow.kafka.records import Record

    settings = ctx.kafka()
    topic = settings.topic(WORKFLOW_HISTORY)
    ids = {i.encode() for i in ctx.args.workflow_ids or ()}

    def keep(record: Record) -> bool:
        # History records are keyed by workflow id: an id filter skips the others undecoded.
        return not ids or record.key in ids

    records = asyncio.run(
        read_to_end(settings, topic, keep=keep, idle_timeout=ctx.timeout, client_id="replay")
    )
    events: list[HistoryEvent] = []
    skipped = 0
    for record in records:
        try:
            message = REGISTRY.parse(decode(record.value))
        except SlotflowError:
            skipped += 1  # a gap it leaves in a replayed workflow is reported by the history check
            continue
        if isinstance(message, HistoryEvent):
            events.append(message)
    if skipped:
        ctx.note(f"{topic}: {skipped} records that are not history events were skipped")
    return group(events)


def _select(histories: list[History], types: set[str], ids: set[str]) -> list[History]:
    return [
        h for h in histories if (not ids or h.workflow_id in ids) and (not types or bool(h.types & types))
    ]


def _has_refs(history: History) -> bool:
    from slotflow.contracts.workflows import PAYLOAD_FIELDS, is_payload_ref

    return any(
        is_payload_ref(getattr(event, name))
        for event in history.events
        for name in PAYLOAD_FIELDS.get(type(event), ())
    )


def _resolve_payloads(ctx: Context, histories: list[History]) -> list[History]:
    """Histories with their large-payload references replaced by the payloads (as the orchestrator
    hands them to the code); untouched when none holds a reference.

    Raises:
        UsageError: references are there but no payload database was named.
    """
    holding = [h for h in histories if _has_refs(h)]
    if not holding:
        return histories
    dsn = ctx.args.payloads_dsn
    if not dsn:
        raise UsageError(
            f"workflow {holding[0].workflow_id} has payloads stored by reference; name the database that "
            "holds them with --payloads-dsn (and --payloads-schema, default orchestrator)"
        )
    import asyncio

    return asyncio.run(_resolved(dsn, ctx.args.payloads_schema, histories))


async def _resolved(dsn: str, schema: str, histories: list[History]) -> list[History]:
    from slotflow.pg.payloads import PostgresPayloadStore
    from slotflow.pg.pool import create_pool
    from slotflow.settings import PostgresSettings
    from slotflow.workflow.payloads import resolve_payloads

    pool = await create_pool(PostgresSettings(dsn=dsn), min_size=1, max_size=2)
    try:
        store = PostgresPayloadStore(pool, schema=schema)
        return [
            History(h.workflow_id, await resolve_payloads(h.events, store)) if _has_refs(h) else h
            for h in histories
        ]
    finally:
        await pool.close()


# -- the check itself ----------------------------------------------------------------------------


def check_history(history: History) -> list[int]:
    """The indexes of the history's run starts; the contract checks a replay relies on.

    Raises:
        BadHistory: no WorkflowStarted at sequence 1, a gap, or events after a terminal event
            (but a new run of the reused id).
    """
    from slotflow.contracts.workflows import TERMINAL_EVENTS

    events, wid = history.events, history.workflow_id
    if not events or events[0].sequence != 1 or not isinstance(events[0], WorkflowStarted):
        first = f"{events[0].message_type} at #{events[0].sequence}" if events else "nothing"
        raise BadHistory(f"workflow {wid}: history must begin with workflow.started at #1, found {first}")
    for before, after in itertools.pairwise(events):
        if after.sequence != before.sequence + 1:
            raise BadHistory(
                f"workflow {wid}: history has a gap after #{before.sequence} (next is #{after.sequence}); "
                "replay needs every event"
            )
        reused = isinstance(after, WorkflowStarted) and after.reused_after is not None
        if isinstance(before, TERMINAL_EVENTS) and not reused:
            raise BadHistory(
                f"workflow {wid}: #{after.sequence} {after.message_type} follows the end "
                f"(#{before.sequence} {before.message_type})"
            )
    return [i for i, e in enumerate(events) if isinstance(e, WorkflowStarted)]


def _open_divergence(events: Sequence[HistoryEvent]) -> NonDeterminismDetected | None:
    last = events[-1] if events else None
    return last if isinstance(last, NonDeterminismDetected) else None


def load_workflow_modules(modules: Sequence[str]) -> list[type[object]]:
    """Import ``modules`` (a package with its submodules) and return their workflow classes.

    Raises:
        CliError: a module cannot be imported, or defines no workflow class.
    """
    from slotflow.workflow.definition import definition_of
    from slotflow.workflow.errors import WorkflowDefinitionError

    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # like `python -m`: the current directory's packages
    found: dict[int, type[object]] = {}
    for name in modules:
        for module in _import_tree(name):
            for value in vars(module).values():
                if not isinstance(value, type) or id(value) in found:
                    continue
                try:
                    definition_of(value)
                except WorkflowDefinitionError:
                    continue
                found[id(value)] = value
    if not found:
        raise CliError(f"no workflow classes (decorated with workflow.defn) in {', '.join(modules)}")
    return list(found.values())


def _import_tree(name: str) -> list[ModuleType]:
    try:
        module = importlib.import_module(name)
    except ImportError as err:
        raise CliError(f"cannot import workflow module {name!r}: {err}") from err
    tree = [module]
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), prefix=f"{name}."):
        try:
            tree.append(importlib.import_module(info.name))
        except ImportError as err:
            raise CliError(f"cannot import workflow module {info.name!r}: {err}") from err
    return tree


def _replayer(modules: Sequence[str]) -> tuple["Replayer", set[str]]:
    from slotflow.workflow import Replayer
    from slotflow.workflow.definition import definition_of

    classes = load_workflow_modules(modules)
    return Replayer(workflows=classes), {definition_of(c).name for c in classes}


def _replay_all(
    ctx: Context, replayer: "Replayer", known: set[str], modules: Sequence[str], histories: list[History]
) -> int:
    from slotflow.workflow.errors import NonDeterminismError, WorkflowError

    # Every history is checked, and its code found, before any is replayed: a bad file fails fast.
    run_starts = [check_history(history) for history in histories]
    for history in histories:
        unknown = history.types - known
        if unknown:
            raise CliError(
                f"workflow {history.workflow_id} is a {', '.join(sorted(unknown))}, which no class in "
                f"{', '.join(modules)} defines (found: {', '.join(sorted(known))}); name its module with --module"
            )
    rows: list[dict[str, Any]] = []
    for history, starts in zip(histories, run_starts, strict=True):
        status = "running"
        for run, start in enumerate(starts):
            end = starts[run + 1] if run + 1 < len(starts) else len(history.events)
            try:
                result = replayer.replay(history.events[:end])
            except NonDeterminismError as err:
                _mismatch(ctx, history, rows, err)
            except WorkflowError as err:
                raise BadHistory(f"workflow {history.workflow_id}, run from #{start + 1}: {err}") from None
            status = result.status
        divergence = _open_divergence(history.events)
        rows.append(
            {
                "workflow_id": history.workflow_id,
                "workflow_type": history.workflow_type,
                "events": len(history.events),
                "runs": len(starts),
                "status": status,
                "result": "match",
                "resolves_non_determinism_at": divergence.at_sequence if divergence else None,
            }
        )
    events = sum(row["events"] for row in rows)
    if ctx.as_json:
        ctx.emit_json({"replayed": rows, "mismatch": None})
    else:
        for row in rows:
            ctx.out.write(_line(row) + "\n")
    for row in rows:
        if row["resolves_non_determinism_at"] is not None:
            ctx.note(
                f"workflow {row['workflow_id']} is stopped by a non-determinism at "
                f"#{row['resolves_non_determinism_at']}; this code replays its history cleanly, so "
                "deploying it resumes the workflow"
            )
    ctx.note(
        f"replayed {len(rows)} histories ({events} events) against {', '.join(modules)}: every decision matches"
    )
    return 0


def _line(row: Mapping[str, Any]) -> str:
    runs = f", {row['runs']} runs" if row["runs"] > 1 else ""
    return f"ok  {row['workflow_id']}  {row['workflow_type']}  {row['events']} events{runs}, {row['status']}"


def _mismatch(ctx: Context, history: History, rows: list[dict[str, Any]], err: Any) -> NoReturn:
    diff = {
        "workflow_id": history.workflow_id,
        "workflow_type": history.workflow_type,
        "sequence": err.sequence,
        "expected": err.expected,
        "got": err.got,
        "message": str(err),
    }
    if ctx.as_json:
        ctx.emit_json({"replayed": rows, "mismatch": diff})
    else:
        for row in rows:
            ctx.out.write(_line(row) + "\n")
        ctx.out.write(
            f"MISMATCH  {history.workflow_id}  {history.workflow_type}\n"
            f"  sequence: {err.sequence}\n"
            f"  expected: {text(err.expected)}   (what the history recorded)\n"
            f"  got:      {text(err.got)}   (what the code did)\n"
        )
    raise ReplayMismatch(
        f"workflow {history.workflow_id} does not replay at sequence {err.sequence}: deploying this code would "
        "stop it; keep the old path behind workflow.patched(...) or fix the code"
    )
