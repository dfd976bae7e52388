"""How long `deploy/devstack/devstack.py up` takes: cold, warm, and the very first jar fetch.

    .venv/bin/python bench/devstack_startup.py [--runs 5] [--skip-first-fetch]

- cold:  `down --clean`, then `up` (jars cached; initdb, storage format and topic creation included)
- warm:  `down`, then `up` (data kept)
- first: `up` with an empty jar cache *and* an empty Maven repository (what a fresh CI machine pays),
  run once, only reported when it finishes within 2 minutes

The bench runs its own stack in a temporary state dir on ports 29092/29093/25432 (override with
BENCH_KAFKA_PORT, BENCH_KAFKA_CONTROLLER_PORT, BENCH_PG_PORT), so a devstack running on the default
ports is left alone. Times are wall-clock seconds of the whole command, Python start-up included.
Results go to stdout as Markdown and to bench/results/devstack_startup.json.
"""

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEVSTACK = REPO / "deploy" / "devstack" / "devstack.py"
PYTHON = REPO / ".venv" / "bin" / "python"
FIRST_FETCH_LIMIT_S = 120.0


def run(args: list[str], env: dict[str, str], timeout: float = 300.0) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run(
        [str(PYTHON), str(DEVSTACK), *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"`devstack.py {' '.join(args)}` failed ({proc.returncode}):\n{proc.stderr}")
    return elapsed, proc.stderr


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def first_line(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    except OSError:
        return "?"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else "?"


def fingerprint() -> dict[str, str]:
    pom = (REPO / "deploy" / "devstack" / "pom.xml").read_text()
    kafka = re.search(r"<kafka\.version>([^<]+)<", pom)
    pg_bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    postgres = str(pg_bins[-1]) if pg_bins else (shutil.which("postgres") or "postgres")
    cpu = "?"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kib = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "memory_gib": f"{mem_kib / 1024 / 1024:.1f}",
        "kernel": platform.release(),
        "kafka": kafka.group(1) if kafka is not None else "?",
        "postgres": first_line([postgres, "--version"]),
        "java": first_line(["java", "-version"]),
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-first-fetch", action="store_true")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="slotflow-devstack-bench-"))
    os.chmod(work, 0o755)  # noqa: S103 - the postgres OS user must reach the data dir (as root)
    env = dict(
        os.environ,
        SLOTFLOW_DEVSTACK_DIR=str(work / "state"),
        SLOTFLOW_KAFKA_PORT=os.environ.get("BENCH_KAFKA_PORT", "29092"),
        SLOTFLOW_KAFKA_CONTROLLER_PORT=os.environ.get("BENCH_KAFKA_CONTROLLER_PORT", "29093"),
        SLOTFLOW_PG_PORT=os.environ.get("BENCH_PG_PORT", "25432"),
    )
    fp = fingerprint()
    results: dict[str, object] = {"fingerprint": fp, "runs": args.runs}
    stats: dict[str, dict[str, float]] = {}
    results["load_average_before"] = os.getloadavg()  # other work on the machine skews the figures
    try:
        if not args.skip_first_fetch:
            first_env = dict(
                env,
                SLOTFLOW_DEVSTACK_CACHE=str(work / "jar-cache"),
                MAVEN_OPTS=f"{os.environ.get('MAVEN_OPTS', '')} -Dmaven.repo.local={work / 'm2'}".strip(),
            )
            print("first up: empty jar cache and empty Maven repository ...", file=sys.stderr)
            elapsed, stderr = run(["up"], first_env, timeout=600)
            fetch = re.search(r"fetched (\d+) jars in ([\d.]+) s", stderr)
            results["first_up_s"] = round(elapsed, 2)
            fetch_s = float(fetch.group(2)) if fetch is not None else None
            results["first_fetch_s"] = fetch_s
            results["first_fetch_jars"] = int(fetch.group(1)) if fetch is not None else None
            results["first_fetch_within_limit"] = fetch_s is not None and fetch_s < FIRST_FETCH_LIMIT_S
            run(["down", "--clean"], first_env)

        run(["up"], env, timeout=600)  # make sure the shared jar cache is complete
        cold: list[float] = []
        warm: list[float] = []
        for i in range(args.runs):
            run(["down", "--clean"], env)
            elapsed, _ = run(["up"], env)
            cold.append(elapsed)
            print(f"cold {i + 1}: {elapsed:.2f} s", file=sys.stderr)
        for i in range(args.runs):
            run(["down"], env)
            elapsed, _ = run(["up"], env)
            warm.append(elapsed)
            print(f"warm {i + 1}: {elapsed:.2f} s", file=sys.stderr)
        down_s, _ = run(["down", "--clean"], env)
        stats["cold_s"], stats["warm_s"] = summary(cold), summary(warm)
        results["cold_s"] = {**stats["cold_s"], "all": [round(v, 2) for v in cold]}
        results["warm_s"] = {**stats["warm_s"], "all": [round(v, 2) for v in warm]}
        results["load_average_after"] = os.getloadavg()
        results["last_down_clean_s"] = round(down_s, 2)
    finally:
        subprocess.run(
            [str(PYTHON), str(DEVSTACK), "down", "--clean"],
            env=env,
            cwd=REPO,
            capture_output=True,
            check=False,
        )
        shutil.rmtree(work, ignore_errors=True)

    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "devstack_startup.json").write_text(json.dumps(results, indent=2) + "\n")

    print(f"machine: nproc {fp['nproc']}, {fp['cpu']}, {fp['memory_gib']} GiB, kernel {fp['kernel']}")
    print(f"versions: Kafka {fp['kafka']}; {fp['postgres']}; {fp['java']}; Python {fp['python']}\n")
    print(f"| start ({args.runs} runs) | median s | min s | max s |")
    print("| --- | --- | --- | --- |")
    for key, label in (("cold_s", "cold: `down --clean`, then `up`"), ("warm_s", "warm: `down`, then `up`")):
        s = stats[key]
        print(f"| {label} | {s['median']} | {s['min']} | {s['max']} |")
    if "first_up_s" in results:
        print(
            f"\nfirst `up` on a fresh machine (empty jar cache and Maven repository): {results['first_up_s']} s, "
            f"of which the jar fetch ({results['first_fetch_jars']} jars): {results['first_fetch_s']} s"
        )


if __name__ == "__main__":
    main()
