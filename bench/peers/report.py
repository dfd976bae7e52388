"""The harness's pure parts: sizes, the interleaving order, adapters' JSON lines, medians and ratios,
and docs/benchmarks/peers.md. No I/O here (tests/unit/bench covers it)."""

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from peers.common import DEFAULT_SIZES

REFERENCE = "slotflow"

#: What each workload's figures mean, for the page (metrics not listed are shown by their name).
METRIC_LABELS = {
    "per_second": "per second, end to end",
    "p50_ms": "latency p50 (ms)",
    "p99_ms": "latency p99 (ms)",
    "events_per_second": "events replayed per second",
    "lateness_p50_ms": "firing lateness p50 (ms)",
    "lateness_p99_ms": "firing lateness p99 (ms)",
    "slots_per_second": "slots per second",
    "seconds_to_progress": "seconds until all progress",
    "decode_events_per_second": "events decoded per second (the replay's floor)",
    "jobdue_relayed_p50_ms": "JobDue relayed p50 (ms after the slot)",
    "jobdue_relayed_p99_ms": "JobDue relayed p99 (ms after the slot)",
    "every_shard_progress_seconds": "seconds until every shard progresses",
    "leases_taken_seconds": "seconds until every shard is owned again",
    "cold_events_per_second": "events replayed per second, the first (cold) replay",
    "first_progress_s": "seconds until the first workflow progresses",
    "workers_ready_s": "seconds until the new workers poll",
    "signal_s": "seconds until every signal is accepted",
    "events": "events in the history replayed",
}

#: Figures that describe the run rather than rate it: shown without a better direction or ratio.
DESCRIPTIVE_METRICS = frozenset({"events"})


class AdapterOutputError(ValueError):
    """An adapter's stdout did not end with the JSON line the contract asks for."""


def parse_sizes(text: str | None, workloads: Sequence[str]) -> dict[str, int]:
    """Sizes per workload from `SIZE`: empty for the issue's sizes; one number for every workload
    but replay (whose size is its history's length, 10,000 events); or `jobs=500,replay=10000`."""
    sizes = {workload: DEFAULT_SIZES[workload] for workload in workloads}
    if not text:
        return sizes
    if "=" not in text:
        every = _positive(text)
        return {workload: size if workload == "replay" else every for workload, size in sizes.items()}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if name.strip() not in sizes:
            raise ValueError(f"size for {name.strip()!r}, which is not among the workloads {list(sizes)}")
        sizes[name.strip()] = _positive(value)
    return sizes


def _positive(text: str) -> int:
    value = int(text.strip())
    if value <= 0:
        raise ValueError(f"sizes are positive, not {value}")
    return value


def split_list(text: str, allowed: Sequence[str] | None = None) -> list[str]:
    """`a,b,c` as a list (blanks and repeats dropped), every item among ``allowed`` if given."""
    items = list(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))
    if allowed is not None:
        unknown = [item for item in items if item not in allowed]
        if unknown:
            raise ValueError(f"unknown {unknown}; choose among {list(allowed)}")
    if not items:
        raise ValueError("the list is empty")
    return items


def rotation(systems: Sequence[str], run_index: int) -> list[str]:
    """The systems in run ``run_index``'s order: rotated by one each run, so no system always runs
    first (on a cold cache) or last (after the others warmed the database)."""
    if not systems:
        return []
    shift = run_index % len(systems)
    return [*systems[shift:], *systems[:shift]]


def parse_adapter_output(stdout: str, system: str, workload: str) -> dict[str, Any]:
    """The adapter's last stdout line, checked: `metrics` (finite numbers) or `not_measured`."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise AdapterOutputError("no output")
    try:
        data = json.loads(lines[-1])
    except json.JSONDecodeError as error:
        raise AdapterOutputError(f"last line is not JSON: {lines[-1][:200]!r}") from error
    if not isinstance(data, dict):
        raise AdapterOutputError("last line is not a JSON object")
    if data.get("system") != system or data.get("workload") != workload:
        raise AdapterOutputError(
            f"answered for {data.get('system')}/{data.get('workload')}, asked {system}/{workload}"
        )
    if "not_measured" in data:
        if not isinstance(data["not_measured"], str) or not data["not_measured"]:
            raise AdapterOutputError("not_measured without a reason")
        return {"not_measured": data["not_measured"]}
    metrics = data.get("metrics")
    if not isinstance(metrics, dict) or not metrics:
        raise AdapterOutputError("neither metrics nor not_measured")
    checked: dict[str, float] = {}
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            raise AdapterOutputError(f"metric {name} is not a number: {value!r}")
        checked[name] = float(value)
    return {"metrics": checked, "notes": str(data.get("notes", "")), "size": data.get("size")}


@dataclass(frozen=True)
class Summary:
    median: float
    low: float
    high: float
    count: int


def summarize(values: Sequence[float]) -> Summary:
    return Summary(statistics.median(values), min(values), max(values), len(values))


def lower_is_better(metric: str) -> bool:
    return metric.endswith(("_ms", "_seconds", "_s")) or metric.startswith("seconds_")


def aggregate(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Summary]]]:
    """Per workload, system and metric: the summary over the runs that measured it."""
    values: dict[str, dict[str, dict[str, list[float]]]] = {}
    for record in records:
        for metric, value in (record.get("metrics") or {}).items():
            per_system = values.setdefault(record["workload"], {}).setdefault(record["system"], {})
            per_system.setdefault(metric, []).append(float(value))
    return {
        workload: {
            system: {metric: summarize(series) for metric, series in metrics.items()}
            for system, metrics in systems.items()
        }
        for workload, systems in values.items()
    }


def ratio(reference: Summary | None, peer: Summary | None) -> float | None:
    """slotflow's median over the peer's; None where either is missing or the peer's is zero."""
    if reference is None or peer is None or peer.median == 0:
        return None
    return reference.median / peer.median


def figure(value: float) -> str:
    """A figure to about three significant digits, thousands separated."""
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def ratio_text(value: float) -> str:
    """A ratio to two decimals; one far below 1 to two significant digits (0.0031, not 0.00)."""
    if value != 0 and abs(value) < 0.1:
        return f"{value:.2g}"
    return f"{value:.2f}"


def cell(summary: Summary | None, runs: int) -> str:
    if summary is None:
        return "—"
    text = f"**{figure(summary.median)}** ({figure(summary.low)}–{figure(summary.high)})"
    if summary.count < runs:
        text += f" [{summary.count} of {runs} runs]"
    return text


def reasons(records: Sequence[Mapping[str, Any]], workload: str) -> dict[str, list[str]]:
    """Why a system has no (or fewer) figures for ``workload``: its reasons and errors, in order."""
    found: dict[str, list[str]] = {}
    for record in records:
        if record["workload"] != workload:
            continue
        if "not_measured" in record:
            text = f"not measured: {record['not_measured']}"
        elif "error" in record:
            text = f"run {record['run']} failed: {record['error']}"
        else:
            continue
        listed = found.setdefault(record["system"], [])
        if text not in listed:
            listed.append(text)
    return found


def _metric_order(metrics: set[str]) -> list[str]:
    known = [metric for metric in METRIC_LABELS if metric in metrics]
    return known + sorted(metrics - set(known))


def workload_section(
    workload: str, size: int, systems: Sequence[str], records: Sequence[Mapping[str, Any]], runs: int
) -> list[str]:
    summaries = aggregate(records).get(workload, {})
    peers = [system for system in systems if system != REFERENCE]
    lines = [f"## {workload} (size {size:,})", ""]
    metrics = _metric_order({metric for per_system in summaries.values() for metric in per_system})
    if metrics:
        show_ratio = REFERENCE in systems
        header = ["metric", *systems, *(f"{REFERENCE} / {peer}" for peer in peers if show_ratio)]
        lines += ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
        for metric in metrics:
            if metric in DESCRIPTIVE_METRICS:
                label = f"{METRIC_LABELS.get(metric, metric)} `{metric}`"
            else:
                better = "lower is better" if lower_is_better(metric) else "higher is better"
                label = f"{METRIC_LABELS.get(metric, metric)} `{metric}` ({better})"
            row = [label, *(cell(summaries.get(system, {}).get(metric), runs) for system in systems)]
            if show_ratio:
                for peer in peers:
                    value = ratio(
                        summaries.get(REFERENCE, {}).get(metric), summaries.get(peer, {}).get(metric)
                    )
                    row.append("—" if value is None or metric in DESCRIPTIVE_METRICS else ratio_text(value))
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    notes: dict[str, str] = {}
    for record in records:
        if record["workload"] == workload and record.get("notes"):
            notes.setdefault(record["system"], record["notes"])
    for system in systems:
        if system in notes:
            lines.append(f"- {system}: {notes[system]}")
    for system, texts in reasons(records, workload).items():
        lines.append(f"- {system}: {'; '.join(texts)}")
    lines.append("")
    return lines


def render(
    *,
    command: str,
    sizes: Mapping[str, int],
    systems: Sequence[str],
    runs: int,
    machine: Mapping[str, Any],
    installs: Mapping[str, Mapping[str, Any]],
    records: Sequence[Mapping[str, Any]],
    load_at_end: Sequence[float],
    runs_asked: int | None = None,
) -> str:
    """docs/benchmarks/peers.md; ``runs`` completed of ``runs_asked`` (when a session ends early)."""
    lines = ["# slotflow beside its peers", ""]
    if runs_asked is not None and runs < runs_asked:
        lines += [
            f"> **Partial: {runs} of {runs_asked} runs.** The harness rewrites this page after every "
            "run; the session ended before the last.",
            "",
        ]
    small = {w: s for w, s in sizes.items() if s < DEFAULT_SIZES[w]}
    if small:
        shown = ", ".join(f"{w} {s:,} (issue: {DEFAULT_SIZES[w]:,})" for w, s in small.items())
        lines += [
            f"> **Development-size run.** Sizes below the issue's: {shown}. These figures show the "
            "harness working end to end; they are not the issue's measurements and say nothing "
            "about its targets.",
            "",
        ]
    loads = [record["load_average"][0] for record in records if record.get("load_average")]
    lines += [
        "Produced by `make bench` (bench/peers/run.py), exactly:",
        "",
        "```sh",
        command,
        "```",
        "",
        f"Medians of {runs} run(s), (min–max) beside each; the systems interleaved, the order rotated "
        "every run; each run of each system in a scratch database (and topic namespace) of its own. "
        f"Ratios are {REFERENCE}'s median over the peer's: above 1 means {REFERENCE} is ahead on a "
        "'higher is better' row and behind on a 'lower is better' one. Raw figures: "
        "bench/results/peers-*.json (not committed).",
        "",
        "## Machine",
        "",
        f"- CPU: {machine.get('cpu')}, {machine.get('cores')} cores; Python {machine.get('python')}; "
        f"PostgreSQL {machine.get('postgres')}",
        f"- started {machine.get('when')}; load average at start "
        f"{' / '.join(str(x) for x in machine.get('load_average_at_start', []))}, at end "
        f"{' / '.join(f'{x:.2f}' for x in load_at_end)}"
        + (f"; 1-minute load after each adapter run {min(loads):.1f} to {max(loads):.1f}" if loads else ""),
        "- Kafka and PostgreSQL of the devstack, on the same machine as every process measured",
        "",
        "## Systems",
        "",
        "| system | version | installed |",
        "|---|---|---|",
    ]
    for system in systems:
        installed = installs.get(system, {})
        if "unavailable" in installed:
            lines.append(f"| {system} | — | not available: {installed['unavailable']} |")
        else:
            lines.append(f"| {system} | {installed.get('version', '—')} | yes |")
    lines.append("")
    for workload, size in sizes.items():
        lines += workload_section(workload, size, systems, records, runs)
    lines += [
        "## Every run",
        "",
        "| run | workload | system | figures | 1-min load after |",
        "|---:|---|---|---|---:|",
    ]
    for record in records:
        if "not_measured" in record:
            continue  # listed under its workload, with the reason
        if "metrics" in record:
            shown = ", ".join(f"{name} {figure(value)}" for name, value in record["metrics"].items())
        else:
            shown = "failed"
        load = record.get("load_average")
        lines.append(
            f"| {record['run']} | {record['workload']} | {record['system']} | {shown} | {load[0]:.2f} |"
            if load
            else f"| {record['run']} | {record['workload']} | {record['system']} | {shown} | — |"
        )
    lines.append("")
    return "\n".join(lines)
