"""Every service installs alone from wheels, and starts: `make check-wheels`.

1. Wheels: every package of libs/ and services/, built with `pip wheel --no-deps` from a copy of
   the tree (a `build/` left in the tree by an earlier build would slip stale modules into a wheel).
2. A wheelhouse of the third-party dependencies, built once: what our wheels declare, resolved
   under the pins of requirements-dev.txt (the durable core's) and of services/stats/requirements.txt
   (the stats worker's; decision 0005), from the package index through pip's cache. Our own
   distributions are never asked of an index: `slotflow` there is an unrelated project, and the
   names we use could be taken one day too.
3. For each service, a fresh virtualenv and `pip install --no-index --find-links <wheels>
   --find-links <wheelhouse> -c <its pins> slotflow-<name>`: that one distribution, with nothing
   but what it declares (pip's own configuration and find-links left out), then `pip check`.
4. Each one started from its virtualenv against Kafka and PostgreSQL (SLOTFLOW_KAFKA_BOOTSTRAP and
   SLOTFLOW_PG_DSN, the devstack's by default) in a topic namespace and a database of its own, until
   it is ready (every service's /readyz, which needs Kafka and PostgreSQL to answer), then stopped
   with SIGTERM, after which it must exit 0. The namespace's topics and the database are deleted
   at the end.

    python3 deploy/wheels/check_wheels.py [--jobs 2] [--keep]

The scratch directory (wheels, wheelhouse, virtualenvs, each service's log) is removed unless the
check fails or `--keep` is given. Exits non-zero naming the step that failed.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORE_PINS = "requirements-dev.txt"
STATS_PINS = "services/stats/requirements.txt"
#: What a copy of the tree needs to build every package (pyprojects read VERSION and LICENSE
#: through links), to pin their dependencies, and the examples the claimer and orchestrator serve.
TREE = ("libs", "services", "examples", "VERSION", "LICENSE", CORE_PINS)
#: Left out of the copy: build output and caches.
NOT_COPIED = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".mypy_cache")
#: How long a service may take to serve after its start, and to exit after SIGTERM (faust's
#: shutdown is the slow one).
SERVE_TIMEOUT = 120.0
STOP_TIMEOUT = 45.0
#: Test-sized topics: the table's partition counts (up to 12) are for production load, and the
#: broker may be shared.
MAX_PARTITIONS = 3


class CheckFailed(Exception):
    """A step of the check did not do what it must; the message says which."""


@dataclass(frozen=True)
class Service:
    """One deployable distribution: how to start it and how to see it serve."""

    name: str
    #: The requirements file whose pins its environment is built with (as the Dockerfile does).
    pins: str
    args: tuple[str, ...]
    #: The setting that opens its listener, and the path that answers 200 once it serves.
    port_setting: str
    path: str
    #: More settings; `{tree}` is the copied tree. The claimer and the orchestrator serve the
    #: examples, found as deploy/kubernetes finds them (PYTHONPATH), since they serve nothing else.
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def distribution(self) -> str:
        return f"slotflow-{self.name}"


SERVICES = (
    Service("ticker", CORE_PINS, (), "SLOTFLOW_TICKER_METRICS_PORT", "/readyz"),
    Service(
        "claimer",
        CORE_PINS,
        (),
        "SLOTFLOW_CLAIMER_METRICS_PORT",
        "/readyz",
        (
            ("PYTHONPATH", "{tree}/examples/payouts:{tree}/examples"),
            ("SLOTFLOW_CLAIMER_HANDLER_MODULES", "payouts,orders.activities"),
        ),
    ),
    Service(
        "orchestrator",
        CORE_PINS,
        (),
        "SLOTFLOW_ORCHESTRATOR_METRICS_PORT",
        "/readyz",
        (("PYTHONPATH", "{tree}/examples"), ("SLOTFLOW_ORCHESTRATOR_WORKFLOW_MODULES", "orders.workflow")),
    ),
    Service("dlq", CORE_PINS, (), "SLOTFLOW_DLQ_METRICS_PORT", "/readyz"),
    Service("api", CORE_PINS, ("serve",), "SLOTFLOW_API_PORT", "/readyz"),
    Service(
        "stats",
        STATS_PINS,
        ("worker",),
        "SLOTFLOW_STATS_HEALTH_PORT",
        "/readyz",
        (("SLOTFLOW_STATS_DATA_DIR", "{tree}/../stats-data"),),
    ),
)

#: Run in the ticker's fresh environment (it has the library, asyncpg and aiokafka): make or remove
#: the check's database and topic namespace. argv: create|remove, the database's name.
STACK_SCRIPT = """
import asyncio, os, sys

import asyncpg
from aiokafka.admin import AIOKafkaAdminClient

from slotflow.kafka.admin import ensure_topics
from slotflow.settings import KafkaSettings


async def main(action: str, database: str) -> None:
    kafka = KafkaSettings()
    admin_dsn = os.environ["SLOTFLOW_CHECK_ADMIN_DSN"]
    conn = await asyncpg.connect(admin_dsn)
    try:
        if action == "create":
            await conn.execute(f'CREATE DATABASE "{database}"')
        else:
            await conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    finally:
        await conn.close()
    if action == "create":
        limit = int(os.environ["SLOTFLOW_CHECK_MAX_PARTITIONS"])
        specs = [s.model_copy(update={"partitions": min(s.partitions, limit)}) for s in kafka.topics()]
        await ensure_topics(kafka.bootstrap, specs, security=kafka.security)
        return
    admin = AIOKafkaAdminClient(**kafka.client_options())
    await admin.start()
    try:
        mine = [t for t in await admin.list_topics() if t.startswith(kafka.topic_namespace + ".")]
        if mine:
            await admin.delete_topics(mine)
    finally:
        await admin.close()


asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def say(message: str) -> None:
    print(f"check-wheels: {message}", flush=True)


def run(command: Sequence[str | Path], *, env: dict[str, str] | None = None, what: str) -> str:
    """Run ``command``; its output, or CheckFailed with its tail naming ``what`` failed."""
    done = subprocess.run(
        [str(part) for part in command], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise CheckFailed(f"{what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if found is None:
        raise CheckFailed(f"cannot read the name of the requirement {requirement!r}")
    return normalised(found.group(1))


def wheel_requirements(wheel: Path) -> tuple[str, list[str]]:
    """A wheel's distribution name and its Requires-Dist lines (without extras' requirements)."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        message = email.parser.Parser().parsestr(archive.read(metadata).decode())
    requires = [r for r in message.get_all("Requires-Dist") or [] if "extra ==" not in r]
    return normalised(str(message["Name"])), requires


def clean_pip_env() -> dict[str, str]:
    """The environment for pip without this machine's pip configuration: an install must find
    everything in the check's two directories, not in a find-links or index configured here."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_database(dsn: str, database: str) -> str:
    # The query first: it may hold paths (sslrootcert=/etc/...) whose slashes are not the path's.
    head, sep, query = dsn.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{database}{sep}{query}"


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our own listener
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


class Check:
    """One run of the check, in a scratch directory."""

    def __init__(self, work: Path, jobs: int, wheelhouse_root: Path) -> None:
        self.work, self.jobs = work, jobs
        self.tree = work / "tree"
        self.wheels = work / "wheels"
        #: Wheelhouses by a digest of what went into them (build_wheelhouse picks one).
        self.wheelhouse_root = wheelhouse_root
        self.wheelhouse = wheelhouse_root
        self.builder = work / "builder"
        self.timings: list[tuple[str, float]] = []

    def timed(self, label: str, step: Callable[[], str]) -> None:
        started = time.monotonic()
        detail = step()
        elapsed = time.monotonic() - started
        self.timings.append((label, elapsed))
        say(f"{label}: {detail} ({elapsed:.1f} s)")

    @property
    def pip(self) -> list[str | Path]:
        return [self.builder / "bin" / "python", "-m", "pip"]

    # -- 1. wheels -------------------------------------------------------------------------

    def build_wheels(self) -> str:
        self.tree.mkdir()
        for name in TREE:
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, self.tree / name, symlinks=True, ignore=NOT_COPIED)
            else:
                shutil.copy2(source, self.tree / name)
        run([sys.executable, "-m", "venv", self.builder], what="creating the build environment")
        # One build environment for every package (build isolation would make one per package,
        # each asking the index for setuptools): the setuptools the pyprojects ask for.
        run([*self.pip, "install", "-q", "setuptools>=77"], what="installing setuptools")
        projects = sorted(
            p.parent for folder in ("libs", "services") for p in self.tree.glob(f"{folder}/*/pyproject.toml")
        )
        # One pip for all of them: a pip started per package cost more than the builds.
        command = [*self.pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", self.wheels]
        run([*command, *projects], what="building the wheels")
        built = sorted(p.name for p in self.wheels.glob("*.whl"))
        if len(built) != len(projects):
            raise CheckFailed(f"{len(projects)} packages gave {len(built)} wheels: {built}")
        return f"{len(built)} built: {', '.join(built)}"

    # -- 2. wheelhouse ---------------------------------------------------------------------

    def build_wheelhouse(self) -> str:
        ours: dict[str, list[str]] = {}
        for wheel in self.wheels.glob("*.whl"):
            name, requires = wheel_requirements(wheel)
            ours[name] = requires
        # What the stats worker's environment holds, and what every other service's does.
        stats_side = {"slotflow-stats", "slotflow-base"}
        groups = {
            CORE_PINS: [r for name, reqs in ours.items() if name != "slotflow-stats" for r in reqs],
            STATS_PINS: [r for name, reqs in ours.items() if name in stats_side for r in reqs],
        }
        third_party = {
            pins: sorted({r for r in requirements if requirement_name(r) not in ours})
            for pins, requirements in groups.items()
        }
        # The same requirements under the same pins for the same Python give the same wheelhouse:
        # one from an earlier run is taken as it is (the step then costs nothing).
        key = hashlib.sha256(
            json.dumps(
                {
                    "python": sys.version,
                    "requirements": third_party,
                    "pins": {pins: (self.tree / pins).read_text() for pins in third_party},
                },
                sort_keys=True,
            ).encode()
        ).hexdigest()[:16]
        self.wheelhouse = self.wheelhouse_root / key
        complete = self.wheelhouse / ".complete"
        reused = complete.exists()
        if not reused:
            shutil.rmtree(self.wheelhouse, ignore_errors=True)
            for pins, requirements in third_party.items():
                run(
                    [*self.pip, "wheel", "-q", "-w", self.wheelhouse, "-c", self.tree / pins, *requirements],
                    what=f"building the wheelhouse under {pins}",
                )
            complete.touch()
        wheels = sorted(self.wheelhouse.glob("*.whl"))
        leaked = [w.name for w in wheels if normalised(w.name.split("-")[0]) in ours]
        if leaked:
            raise CheckFailed(f"the wheelhouse holds distributions named like ours: {leaked}")
        return f"{len(wheels)} third-party wheels in {self.wheelhouse}" + (
            " (built before)" if reused else ""
        )

    # -- 3. one environment per service ----------------------------------------------------

    def venv(self, service: Service) -> Path:
        return self.work / "venvs" / service.name

    def install(self, service: Service) -> str:
        started = time.monotonic()
        venv = self.venv(service)
        # No pip inside: the builder's pip installs into it (`pip --python`), which is quicker
        # than bootstrapping one per environment and leaves only the service and what it needs.
        run([sys.executable, "-m", "venv", "--without-pip", venv], what=f"{service.name}: creating its venv")
        target: list[str | Path] = ["--python", venv / "bin" / "python"]
        run(
            [
                *self.pip,
                *target,
                "install",
                "-q",
                # Bytecode is written as modules are first imported: compiling every module of
                # every dependency up front was most of an install's time.
                "--no-compile",
                "--no-index",
                "--find-links",
                self.wheels,
                "--find-links",
                self.wheelhouse,
                "-c",
                self.tree / service.pins,
                service.distribution,
            ],
            env=clean_pip_env(),
            what=f"{service.name}: pip install --no-index {service.distribution}",
        )
        run([*self.pip, *target, "check"], env=clean_pip_env(), what=f"{service.name}: pip check")
        installed = list(venv.glob("lib/python*/site-packages/*.dist-info"))
        return f"{len(installed)} distributions in {time.monotonic() - started:.1f} s"

    def install_all(self) -> str:
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            results = dict(zip(SERVICES, pool.map(self.install, SERVICES), strict=True))
        return "; ".join(f"{s.name} {detail}" for s, detail in results.items())

    # -- 4. start each, see it serve, stop it ----------------------------------------------

    def stack_env(self, namespace: str) -> dict[str, str]:
        """SLOTFLOW_KAFKA_* (the broker and its security settings) from this environment, in the
        check's namespace; nothing else of this machine's SLOTFLOW_* reaches the services."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTFLOW_")}
        env.update({k: v for k, v in os.environ.items() if k.startswith("SLOTFLOW_KAFKA_")})
        env.setdefault("SLOTFLOW_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
        env["SLOTFLOW_KAFKA_TOPIC_NAMESPACE"] = namespace
        return env

    def stack(self, action: str, env: dict[str, str], database: str) -> None:
        python = self.venv(SERVICES[0]) / "bin" / "python"
        run([python, "-c", STACK_SCRIPT, action, database], env=env, what=f"{action} the check's stack")

    def serve(self, admin_dsn: str) -> str:
        unique = uuid.uuid4().hex[:10]
        namespace, database = f"wheels-{unique}", f"wheels_{unique}"
        env = self.stack_env(namespace)
        env["SLOTFLOW_PG_DSN"] = with_database(admin_dsn, database)
        self.stack(
            "create",
            {
                **env,
                "SLOTFLOW_CHECK_ADMIN_DSN": admin_dsn,
                "SLOTFLOW_CHECK_MAX_PARTITIONS": str(MAX_PARTITIONS),
            },
            database,
        )
        try:
            return self.start_and_stop(env)
        finally:
            self.stack("remove", {**env, "SLOTFLOW_CHECK_ADMIN_DSN": admin_dsn}, database)

    def start_and_stop(self, env: dict[str, str]) -> str:
        processes: dict[Service, tuple[subprocess.Popen[bytes], int, float]] = {}
        logs = self.work / "logs"
        logs.mkdir()
        try:
            for service in SERVICES:
                port = free_port()
                service_env = {
                    **env,
                    service.port_setting: str(port),
                    **{name: value.format(tree=self.tree) for name, value in service.settings},
                }
                with (logs / f"{service.name}.log").open("wb") as log:
                    process = subprocess.Popen(
                        [
                            self.venv(service) / "bin" / "python",
                            "-m",
                            f"slotflow_{service.name}",
                            *service.args,
                        ],
                        env=service_env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=self.work,
                    )
                processes[service] = (process, port, time.monotonic())
            served = {s: self.wait_until_served(s, *processes[s]) for s in SERVICES}
        finally:
            # Every process is stopped, whatever failed: none may outlive the check.
            stopped = {s: self.stop(s, process) for s, (process, _, _) in processes.items()}
        problems = [problem for _, problem in stopped.values() if problem]
        if problems:
            raise CheckFailed("\n".join(problems))
        return "; ".join(
            f"{s.name} served {s.path} after {served[s]:.1f} s and stopped {stopped[s][0]:.1f} s after SIGTERM"
            for s in SERVICES
        )

    def wait_until_served(
        self, service: Service, process: subprocess.Popen[bytes], port: int, since: float
    ) -> float:
        url = f"http://127.0.0.1:{port}{service.path}"
        while time.monotonic() - since < SERVE_TIMEOUT:
            if process.poll() is not None:
                raise CheckFailed(
                    f"{service.name} exited ({process.returncode}) before it served:\n{self.log(service)}"
                )
            if answers(url):
                return time.monotonic() - since
            time.sleep(0.25)
        raise CheckFailed(
            f"{service.name} did not serve {service.path} within {SERVE_TIMEOUT:.0f} s:\n{self.log(service)}"
        )

    def stop(self, service: Service, process: subprocess.Popen[bytes]) -> tuple[float, str | None]:
        """SIGTERM, and how long the exit took, with what was wrong with it (None: a clean stop)."""
        started = time.monotonic()
        if process.poll() is not None:
            return (
                0.0,
                f"{service.name} had exited ({process.returncode}) before SIGTERM:\n{self.log(service)}",
            )
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return STOP_TIMEOUT, f"{service.name} did not exit within {STOP_TIMEOUT:.0f} s of SIGTERM"
        # uvicorn (the api) re-raises the SIGTERM it handled once its shutdown is complete.
        if process.returncode not in (0, -signal.SIGTERM):
            return time.monotonic() - started, (
                f"{service.name} exited {process.returncode} after SIGTERM:\n{self.log(service)}"
            )
        return time.monotonic() - started, None

    def log(self, service: Service, chars: int = 4000) -> str:
        path = self.work / "logs" / f"{service.name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="virtualenvs built at once (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument(
        "--wheelhouses",
        type=Path,
        default=REPO / ".cache" / "wheelhouses",
        help="where third-party wheelhouses are kept between runs (default .cache/wheelhouses)",
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    admin_dsn = os.environ.get("SLOTFLOW_PG_DSN", "postgresql://slotflow@127.0.0.1:15432/slotflow")
    work = Path(tempfile.mkdtemp(prefix="slotflow-wheels-"))
    check = Check(work, args.jobs, args.wheelhouses)
    started = time.monotonic()
    try:
        check.timed("wheels", check.build_wheels)
        check.timed("wheelhouse", check.build_wheelhouse)
        check.timed("virtualenvs", check.install_all)
        check.timed("services", lambda: check.serve(admin_dsn))
    except CheckFailed as err:
        say(f"FAILED: {err}")
        say(f"kept {work} for a look")
        return 1
    say(f"every service installed alone from wheels and served; {time.monotonic() - started:.0f} s in all")
    if args.keep:
        say(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
