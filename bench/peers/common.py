"""What every adapter shares: its command line and the one JSON line it ends with.

Standard library only: adapters of peers run in the peers' own virtualenv, where slotflow and the
project's bench helpers are not installed.

    python bench/peers/<system>.py <workload> --size N --pg-dsn DSN [--kafka-bootstrap HOST:PORT] [--workers 2]

The last line on stdout is one JSON object: the figures (`result`) or why there are none
(`not_measured`). Exit status 0 for both; anything else is an error of the adapter.
"""

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

WORKLOADS = ("jobs", "schedules", "workflows", "replay", "recovery")

#: The issue's sizes: jobs and schedules counted, workflows started at once, events in the replayed
#: history, workflows open when the process is killed.
DEFAULT_SIZES = {"jobs": 20_000, "schedules": 1_000, "workflows": 2_000, "replay": 10_000, "recovery": 10_000}


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("workload", choices=WORKLOADS)
    parser.add_argument("--size", type=int, default=None, help="default: the issue's size for the workload")
    parser.add_argument(
        "--pg-dsn", required=True, help="a PostgreSQL server where scratch databases may be made"
    )
    parser.add_argument("--kafka-bootstrap", default=None, help="HOST:PORT (systems that use Kafka)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    args = parser.parse_args(argv)
    if args.size is None:
        args.size = DEFAULT_SIZES[args.workload]
    if args.size <= 0:
        parser.error("--size must be positive")
    return args


def result(system: str, workload: str, size: int, metrics: Mapping[str, float], notes: str = "") -> str:
    """The JSON line of a measured workload (non-finite figures refused: they are no measurement)."""
    bad = [name for name, value in metrics.items() if not math.isfinite(float(value))]
    if bad:
        raise ValueError(f"non-finite metrics {bad}")
    return json.dumps(
        {
            "system": system,
            "workload": workload,
            "size": size,
            "metrics": {name: float(value) for name, value in metrics.items()},
            "notes": notes,
        }
    )


def not_measured(system: str, workload: str, reason: str) -> str:
    """The JSON line of a workload the system cannot do, or cannot do here."""
    return json.dumps({"system": system, "workload": workload, "not_measured": reason})


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest rank below, as the rest of bench/ computes it."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency_metrics(
    latencies_s: Sequence[float], count: int, elapsed_s: float, **extra: float
) -> dict[str, Any]:
    """per_second, p50_ms and p99_ms from per-item latencies (seconds) and the whole run's length."""
    if elapsed_s <= 0:
        raise ValueError("elapsed time must be positive")
    return {
        "per_second": count / elapsed_s,
        "p50_ms": 1000 * percentile(latencies_s, 0.50),
        "p99_ms": 1000 * percentile(latencies_s, 0.99),
        **extra,
    }
