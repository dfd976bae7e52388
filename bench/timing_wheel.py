"""Cost of add, cancel and expire in the timing wheel versus a heapq baseline, at 1e3 to 1e6 pending.

    .venv/bin/python bench/timing_wheel.py [--runs 3] [--ops 50000] [--sizes 1000,100000,1000000]
                                           [--tick-ms 10] [--wheel-size 256]

For each pending count P both structures first get P timers spread uniformly over the next hour,
then three measurements, each over `--ops` operations:

- add:    arm a timer at a uniform random instant within the next hour
- cancel: disarm the timers just added
- hold:   the steady state of a ticker: each round the clock moves by hour / P, one timer is armed
          within the next hour and whatever is due expires (about one per round), so the pending
          count stays at P. The figure is time per round (one add plus one expiry).

The heap baseline is what a careful asyncio program would write: `heapq` of (deadline, seq, key)
with a dict for replace/cancel (lazy deletion, stale entries skipped on pop). Both convert the
deadline to integer microseconds the same way. Times are CPU time of this process
(`time.process_time`), so other processes on a shared machine do not count; the pending set is
`gc.freeze()`d after it is built so a full collection of a million objects does not land in one
measurement at random. Results: Markdown on stdout, JSON in bench/results/timing_wheel.json.
"""

import argparse
import gc
import heapq
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from _common import cpu_model

from slotflow.core.timing_wheel import TimingWheel

REPO = Path(__file__).resolve().parents[1]
START = datetime(2026, 6, 1, tzinfo=UTC)
HORIZON = timedelta(hours=1)
_US = timedelta(microseconds=1)


class Timers(Protocol):
    def add(self, key: int, deadline: datetime) -> None: ...
    def cancel(self, key: int) -> bool: ...
    def advance(self, now: datetime) -> list[tuple[int, datetime]]: ...
    def __len__(self) -> int: ...


class HeapTimers:
    """The baseline: a binary heap with lazy deletion."""

    def __init__(self, start: datetime) -> None:
        self._start = start
        self._heap: list[tuple[int, int, int, datetime]] = []
        self._live: dict[int, int] = {}  # key -> seq of its live entry
        self._seq = 0

    def __len__(self) -> int:
        return len(self._live)

    def add(self, key: int, deadline: datetime) -> None:
        self._seq += 1
        self._live[key] = self._seq
        heapq.heappush(self._heap, ((deadline - self._start) // _US, self._seq, key, deadline))

    def cancel(self, key: int) -> bool:
        return self._live.pop(key, None) is not None

    def advance(self, now: datetime) -> list[tuple[int, datetime]]:
        now_us = (now - self._start) // _US
        heap, live, fired = self._heap, self._live, []
        while heap and heap[0][0] <= now_us:
            _, seq, key, deadline = heapq.heappop(heap)
            if live.get(key) == seq:
                del live[key]
                fired.append((key, deadline))
        return fired


def build(kind: str, pending: int, rng: random.Random, tick: timedelta, wheel_size: int) -> Timers:
    timers: Timers
    if kind == "wheel":
        timers = TimingWheel[int](tick=tick, wheel_size=wheel_size, start=START)
    else:
        timers = HeapTimers(START)
    for key in range(pending):
        timers.add(key, START + rng.random() * HORIZON)
    gc.collect()
    gc.freeze()
    return timers


def timed(work: Callable[[], object]) -> float:
    started = time.process_time()
    work()
    return time.process_time() - started


def measure(kind: str, pending: int, args: argparse.Namespace, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    ops = args.ops
    timers = build(kind, pending, rng, timedelta(milliseconds=args.tick_ms), args.wheel_size)
    fresh = range(pending, pending + ops)
    deadlines = [START + rng.random() * HORIZON for _ in fresh]

    def add_all() -> None:
        for key, deadline in zip(fresh, deadlines, strict=True):
            timers.add(key, deadline)

    def cancel_all() -> None:
        for key in fresh:
            timers.cancel(key)

    add_s = timed(add_all)
    cancel_s = timed(cancel_all)
    if len(timers) != pending:
        sys.exit(f"{kind}: {len(timers)} pending after cancel, expected {pending}")

    step = HORIZON / pending
    offsets = [rng.random() * HORIZON for _ in range(ops)]
    expired = 0

    def hold() -> None:
        nonlocal expired
        now = START
        key = pending + ops
        for offset in offsets:
            now += step
            timers.add(key, now + offset)
            key += 1
            expired += len(timers.advance(now))

    hold_s = timed(hold)
    gc.unfreeze()
    return {
        "add_us": add_s / ops * 1e6,
        "cancel_us": cancel_s / ops * 1e6,
        "hold_us": hold_s / ops * 1e6,
        "expired_per_round": expired / ops,
    }


def fingerprint() -> dict[str, str]:
    return {
        "cpu": cpu_model(),
        "cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "system": f"{platform.system()} {platform.release()}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ops", type=int, default=50_000)
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--tick-ms", type=float, default=10.0)
    parser.add_argument("--wheel-size", type=int, default=256)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    results: dict[str, dict[str, dict[str, float]]] = {}
    for pending in sizes:
        for kind in ("wheel", "heap"):
            runs = [measure(kind, pending, args, seed=run) for run in range(args.runs)]
            results.setdefault(str(pending), {})[kind] = {
                metric: statistics.median(run[metric] for run in runs) for metric in runs[0]
            }
            print(f"# {kind} P={pending}: {results[str(pending)][kind]}", file=sys.stderr)

    machine = fingerprint()
    print(
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['implementation']} "
        f"{machine['python']}, {machine['system']}"
    )
    print(
        f"Wheel: tick {args.tick_ms:g} ms, {args.wheel_size} buckets per level. Median of {args.runs} runs, "
        f"{args.ops} operations each; CPU microseconds per operation.\n"
    )
    print("| pending | op | wheel µs | heap µs | wheel / heap |")
    print("|---:|---|---:|---:|---:|")
    for pending in sizes:
        row = results[str(pending)]
        for metric, label in (("add_us", "add"), ("cancel_us", "cancel"), ("hold_us", "hold (add + expire)")):
            wheel, heap = row["wheel"][metric], row["heap"][metric]
            print(f"| {pending:,} | {label} | {wheel:.2f} | {heap:.2f} | {wheel / heap:.2f} |")
    print("\n| op | wheel at max / min pending | heap at max / min pending |")
    print("|---|---:|---:|")
    low, high = str(sizes[0]), str(sizes[-1])
    for metric, label in (("add_us", "add"), ("cancel_us", "cancel"), ("hold_us", "hold (add + expire)")):
        growth = [results[high][kind][metric] / results[low][kind][metric] for kind in ("wheel", "heap")]
        print(f"| {label} | {growth[0]:.2f} | {growth[1]:.2f} |")

    out = REPO / "bench" / "results" / "timing_wheel.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine, "args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
