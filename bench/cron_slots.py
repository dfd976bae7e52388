"""The cost of "when does this cron fire next?", by expression kind: slotflow beside croniter and cronsim.

    .venv/bin/python bench/cron_slots.py [--runs 5] [--questions 2000]

The question is the ticker's: the next slot strictly after the one it just fired. For each
expression the benchmark walks `--questions` successive slots from 2026-01-01T00:00 and asks each
implementation, once per slot, for the next one after it:

- slotflow's field search: `CronFields.next_after(wall time)`, the naive wall-time search;
- slotflow's `next_slot(spec, dst, after=...)` in UTC: what the ticker calls (the search, the
  wall-time mapping and the `Slot` it returns);
- croniter 7: a copy of a parsed template, `set_current`, `get_next` (how slotflow used croniter
  before it had its own search: building a croniter per question costs several times more);
- cronsim 2.9: `next(CronSim(expression, after))`, its only way to ask from an instant.

Every implementation answers the same questions, and the answers are checked equal (the
expressions are ones every implementation reads alike). Times are CPU time of this process
(`time.process_time_ns`), per question; each run measures every implementation once per
expression, the implementations' order rotated from run to run, and the figures are medians over
the runs with the ratio to slotflow's field search taken per run and its median reported. Results:
Markdown on stdout, JSON in bench/results/cron_slots.json.
"""

import argparse
import copy
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

from _common import RESULTS, fingerprint
from croniter import croniter
from cronsim import CronSim, CronSimError

from slotflow.contracts import CronSpec, DstPolicy
from slotflow.core._cronfields import parse_expression
from slotflow.core.cronslots import next_slot

START = datetime(2026, 1, 1)  # noqa: DTZ001 - naive wall time, as every implementation walks it

#: (kind, expression): the expression kinds a ticker meets, then the L, W and # forms.
EXPRESSIONS = [
    ("every minute", "* * * * *"),
    ("every 15 minutes", "*/15 * * * *"),
    ("daily at a fixed time", "30 2 * * *"),
    ("business hours", "0 9-17 * * 1-5"),
    ("every 10 seconds", "*/10 * * * * *"),
    ("days of the month", "0 0 1,15 * *"),
    ("day-of-month or weekday", "0 0 13 * 5"),
    ("yearly", "0 0 1 1 *"),
    ("last day (L)", "0 12 L * *"),
    ("nearest weekday (W)", "0 8 15W * *"),
    ("nth weekday (#)", "0 9 * * 1#2"),
]
IMPLEMENTATIONS = ("slotflow search", "slotflow next_slot", "croniter", "cronsim")
Ask = Callable[[datetime], datetime]


def askers(expression: str) -> dict[str, Ask]:
    """One function per implementation that reads the expression: the next naive wall time after
    a naive wall time (cronsim has no `W`)."""
    fields = parse_expression(expression).fields(None)
    spec = CronSpec(expression=expression)
    policy = DstPolicy()
    six = len(expression.split()) == 6
    template = croniter(expression, START, ret_type=datetime, second_at_beginning=six)

    def search(after: datetime) -> datetime:
        found = fields.next_after(after)
        if found is None:
            raise RuntimeError(f"{expression} has no slot after {after}")
        return found

    def full(after: datetime) -> datetime:
        slot = next_slot(spec, policy, after=after.replace(tzinfo=UTC))
        if slot is None:
            raise RuntimeError(f"{expression} has no slot after {after}")
        return slot.at.replace(tzinfo=None)

    def with_croniter(after: datetime) -> datetime:
        walker = copy.copy(template)
        walker.set_current(after, force=True)
        found: datetime = walker.get_next(datetime)
        return found

    def with_cronsim(after: datetime) -> datetime:
        return next(CronSim(expression, after))

    found: dict[str, Ask] = {"slotflow search": search, "slotflow next_slot": full, "croniter": with_croniter}
    try:
        CronSim(expression, START)
    except CronSimError:
        return found
    return {**found, "cronsim": with_cronsim}


def questions(expression: str, count: int) -> list[datetime]:
    """The slots the ticker would ask from: START, then each slot in turn."""
    fields = parse_expression(expression).fields(None)
    asked = [START]
    while len(asked) < count:
        found = fields.next_after(asked[-1])
        if found is None:
            break
        asked.append(found)
    return asked


def cpu_per_question(ask: Ask, asked: list[datetime]) -> tuple[float, list[datetime]]:
    gc.collect()
    started = time.process_time_ns()
    answers = [ask(after) for after in asked]
    return (time.process_time_ns() - started) / len(asked) / 1000, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--questions", type=int, default=2000)
    args = parser.parse_args()
    machine = fingerprint()
    per_kind: dict[str, dict[str, list[float]]] = {
        kind: {name: [] for name in (*IMPLEMENTATIONS, *(f"{n} / search" for n in IMPLEMENTATIONS[1:]))}
        for kind, _ in EXPRESSIONS
    }
    for run in range(args.runs):
        order = IMPLEMENTATIONS[run % 4 :] + IMPLEMENTATIONS[: run % 4]
        for kind, expression in EXPRESSIONS:
            asked = questions(expression, args.questions)
            ask = askers(expression)
            times: dict[str, float] = {}
            answers: dict[str, list[datetime]] = {}
            for name in (n for n in order if n in ask):
                ask[name](asked[0])  # parsed and warm before it is timed
                times[name], answers[name] = cpu_per_question(ask[name], asked)
            if len({tuple(a) for a in answers.values()}) != 1:
                raise SystemExit(f"the implementations disagree on {expression!r}")
            for name, value in times.items():
                per_kind[kind][name].append(value)
            for name in IMPLEMENTATIONS[1:]:
                if name in times:
                    per_kind[kind][f"{name} / search"].append(times[name] / times["slotflow search"])
            print(f"# run {run + 1}: {kind}: {times}", file=sys.stderr)
    medians = {
        kind: {name: statistics.median(v) for name, v in row.items() if v} for kind, row in per_kind.items()
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cron_slots.json").write_text(
        json.dumps({"machine": machine, "args": vars(args), "runs": per_kind, "medians": medians}, indent=1)
    )
    print(f"Machine: {machine['cpu']}, {machine['cores']} cores, CPython {machine['python']}, ", end="")
    print(
        f"load average at start {machine['load_average_at_start']}; {args.runs} runs, {args.questions} questions."
    )
    print()
    print(
        "| kind | expression | slotflow search µs | slotflow next_slot µs | croniter µs | cronsim µs |",
        end="",
    )
    print(" croniter / search | cronsim / search | next_slot / search |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind, expression in EXPRESSIONS:
        m = medians[kind]
        cells = [
            _cell(m, "slotflow search", 2),
            _cell(m, "slotflow next_slot", 2),
            _cell(m, "croniter", 2),
            _cell(m, "cronsim", 2),
            _cell(m, "croniter / search", 1),
            _cell(m, "cronsim / search", 1),
            _cell(m, "slotflow next_slot / search", 1),
        ]
        print(f"| {kind} | `{expression}` | {' | '.join(cells)} |")


def _cell(row: dict[str, float], name: str, digits: int) -> str:
    return f"{row[name]:.{digits}f}" if name in row else "n/a"


if __name__ == "__main__":
    main()
