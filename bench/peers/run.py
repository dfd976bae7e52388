"""The peer benchmarks' harness: every workload on slotflow and on each peer, in one session.

    make bench [SIZE=500 | SIZE=jobs=500,schedules=1000] [RUNS=3] [SYSTEMS=slotflow,bare,...] [WORKLOADS=jobs,...]
    .venv/bin/python bench/peers/run.py --size 500 --runs 3 --systems slotflow,bare --workloads jobs,replay

First each chosen system is installed (bench/peers/install.py, cached); a system that cannot be
had here is "not measured" with the installer's reason. Then, for each run, for each workload, each
system's adapter (bench/peers/<system>.py) runs as a process of its own, the systems' order rotated
every run so that they share the machine's load of the moment (interleaved, never all of one system
then all of the next). An adapter's last stdout line is its JSON (peers/common.py); its stderr is
kept in bench/results/peers-logs/. At the end: the raw records in bench/results/peers-<time>.json
and the page, docs/benchmarks/peers.md by default: medians with min and max, the ratio
slotflow/peer per workload and metric, the machine, its load, and the command.

Connection settings come from the devstack's environment (SLOTFLOW_PG_DSN, SLOTFLOW_KAFKA_BOOTSTRAP),
which `make bench` starts as `make test` does.
"""

import sys
from pathlib import Path

# Run as a script, bench/peers/ comes first on sys.path, where slotflow.py would stand in for the
# slotflow package: the bench directory goes there instead (peers.*, the bench's shared modules).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import asyncio
import json
import os
import shlex
import signal
import subprocess
import time
from datetime import UTC, datetime
from typing import Any

import asyncpg
from _common import REPO, RESULTS, fingerprint

from peers.common import WORKLOADS
from peers.report import AdapterOutputError, parse_adapter_output, parse_sizes, render, rotation, split_list

PEERS = Path(__file__).resolve().parent
#: How long an adapter that timed out has to clean up after SIGINT before it is killed.
GRACE_SECONDS = 60
SYSTEMS = ("slotflow", "bare", "procrastinate", "dbos", "temporal")


def shown(path: str) -> str:
    """A path as the records show it: relative to the checkout (no machine's paths in results)."""
    return path.replace(f"{REPO}/", "")


def install(system: str) -> dict[str, Any]:
    """install.py's answer for ``system``; an installer that breaks makes the system unavailable."""
    command = [sys.executable, str(PEERS / "install.py"), system]
    print(f"bench: installing {system}", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)
    sys.stderr.write(done.stderr)
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        answer = None
    if done.returncode != 0 or not isinstance(answer, dict):
        tail = " / ".join(done.stderr.strip().splitlines()[-3:])
        return {"unavailable": f"install.py {system} exited with {done.returncode}: {tail}"}
    if "unavailable" not in answer and "python" not in answer:
        return {"unavailable": f"install.py {system} answered neither python nor unavailable"}
    return answer


def run_adapter(
    system: str, workload: str, size: int, installed: dict[str, Any], args: argparse.Namespace, log: Path
) -> dict[str, Any]:
    """One adapter process; its outcome: metrics, not_measured, or error (never a made-up figure)."""
    adapter = PEERS / f"{system}.py"
    if not adapter.exists():
        return {"not_measured": f"no adapter bench/peers/{system}.py"}
    command = [
        installed["python"],
        str(adapter),
        workload,
        "--size",
        str(size),
        "--pg-dsn",
        args.pg_dsn,
        "--workers",
        str(args.workers),
    ]
    if args.kafka_bootstrap:
        command += ["--kafka-bootstrap", args.kafka_bootstrap]
    env = {**os.environ, **{k: str(v) for k, v in installed.get("env", {}).items()}}
    started = time.monotonic()
    with log.open("w") as stderr:
        # A session of its own: on a timeout the adapter and the processes it started go together.
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, _ = process.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            # SIGINT first, as Ctrl-C would: asyncio cancels the adapter's work and its clean-up
            # (dropping the scratch database, deleting topics) runs; SIGKILL if that hangs.
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.communicate(timeout=GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
            return {"error": f"timed out after {args.timeout} s (log {shown(str(log))})"}
    seconds = time.monotonic() - started
    if process.returncode != 0:
        tail = " / ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        return {"error": f"exit {process.returncode}: {tail[-400:]}", "seconds": seconds}
    try:
        parsed = parse_adapter_output(stdout, system, workload)
    except AdapterOutputError as error:
        return {"error": f"bad output: {error}", "seconds": seconds}
    if "metrics" in parsed and parsed.get("size") != size:
        return {"error": f"asked for size {size}, measured {parsed.get('size')}", "seconds": seconds}
    return {**parsed, "seconds": seconds}


async def server_version(dsn: str) -> str | None:
    try:
        conn = await asyncpg.connect(dsn)
    except (OSError, asyncpg.PostgresError) as error:
        raise SystemExit(
            f"PostgreSQL at the given DSN is not reachable ({error}); `make up` first"
        ) from error
    try:
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--size", default="", help="N for every workload but replay, or jobs=N,schedules=M,..."
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pg-dsn", default=os.environ.get("SLOTFLOW_PG_DSN"))
    parser.add_argument("--kafka-bootstrap", default=os.environ.get("SLOTFLOW_KAFKA_BOOTSTRAP"))
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds one adapter run may take")
    parser.add_argument(
        "--output", default="docs/benchmarks/peers.md", help="the page, relative to the checkout"
    )
    parser.add_argument(
        "--command", default=None, help="the command shown on the page (make bench passes its own)"
    )
    parser.add_argument(
        "--render",
        metavar="RAW_JSON",
        default=None,
        help="measure nothing: write the page again from a raw file of an earlier run "
        "(bench/results/peers-*.json), e.g. after a change to the page's layout",
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        return args
    try:
        args.system_list = split_list(args.systems)
        args.workload_list = split_list(args.workloads, WORKLOADS)
        args.sizes = parse_sizes(args.size, args.workload_list)
    except ValueError as error:
        parser.error(str(error))
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if not args.pg_dsn:
        parser.error("no PostgreSQL: set SLOTFLOW_PG_DSN (the devstack's env) or pass --pg-dsn")
    if args.command is None:
        args.command = "python bench/peers/run.py " + shlex.join(
            arg for arg in (argv if argv is not None else sys.argv[1:])
        )
    return args


def render_raw(raw: Path, output: Path) -> None:
    """The page for the runs a raw file holds, measuring nothing: how the harness writes the page
    after every run, and `--render` for an earlier run's file after a change to the layout."""
    data = json.loads(raw.read_text())
    page = render(
        command=data["command"],
        sizes=data["sizes"],
        systems=data["systems"],
        runs=data["runs"],
        machine=data["machine"],
        installs=data["installs"],
        records=data["records"],
        load_at_end=data["load_average_at_end"],
        runs_asked=data.get("runs_asked"),
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(page)


def main() -> None:
    args = parse_args()
    if args.render is not None:
        render_raw(Path(args.render), REPO / args.output)
        print(f"bench: wrote {shown(args.output)} from {shown(args.render)}", file=sys.stderr)
        return
    machine = fingerprint(asyncio.run(server_version(args.pg_dsn)))
    installs = {system: install(system) for system in args.system_list}
    for system, answer in installs.items():
        state = f"unavailable: {answer['unavailable']}" if "unavailable" in answer else "ready"
        print(f"bench: {system} {state}", file=sys.stderr, flush=True)
    logs = RESULTS / "peers-logs"
    logs.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    records: list[dict[str, Any]] = []
    for run in range(args.runs):
        for workload in args.workload_list:
            for system in rotation(args.system_list, run):
                size = args.sizes[workload]
                installed = installs[system]
                if "unavailable" in installed:
                    outcome: dict[str, Any] = {"not_measured": installed["unavailable"]}
                else:
                    log = logs / f"{stamp}-{run + 1}-{workload}-{system}.log"
                    print(
                        f"bench: run {run + 1}/{args.runs} {workload} {system} size {size}",
                        file=sys.stderr,
                        flush=True,
                    )
                    outcome = run_adapter(system, workload, size, installed, args, log)
                record = {
                    "run": run + 1,
                    "workload": workload,
                    "system": system,
                    "size": size,
                    **outcome,
                    "load_average": [round(x, 2) for x in os.getloadavg()],
                }
                records.append(record)
                summary = record.get("metrics") or record.get("not_measured") or record.get("error")
                print(f"bench:   {summary}", file=sys.stderr, flush=True)
        # Written after every run, so a session that ends early keeps what it measured.
        write_outputs(args, machine, installs, records, stamp, completed_runs=run + 1)


def write_outputs(
    args: argparse.Namespace,
    machine: dict[str, Any],
    installs: dict[str, dict[str, Any]],
    records: list[dict[str, Any]],
    stamp: str,
    *,
    completed_runs: int,
) -> None:
    """The raw JSON and the page for the runs completed so far (all of them at the end)."""
    load_at_end = list(os.getloadavg())
    RESULTS.mkdir(parents=True, exist_ok=True)
    raw = RESULTS / f"peers-{stamp}.json"
    visible_installs = {
        system: {**answer, **({"python": shown(answer["python"])} if "python" in answer else {})}
        for system, answer in installs.items()
    }
    raw.write_text(
        json.dumps(
            {
                "command": args.command,
                "sizes": args.sizes,
                "runs": completed_runs,
                "runs_asked": args.runs,
                "systems": args.system_list,
                "machine": machine,
                "installs": visible_installs,
                "records": records,
                "load_average_at_end": load_at_end,
            },
            indent=2,
        )
        + "\n"
    )
    output = REPO / args.output
    render_raw(raw, output)
    print(
        f"bench: wrote {shown(str(output))} and {shown(str(raw))} ({completed_runs}/{args.runs} runs)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
