"""Install one system for the peer benchmarks, idempotently, and say how to run its adapter.

    .venv/bin/python bench/peers/install.py <system>

Prints one JSON object on stdout and exits 0 either way:

- {"python": "<interpreter for the adapter>", "env": {...}, "version": "..."}: ready;
- {"unavailable": "<why, with the command that failed and its error>"}: the harness reports the
  system's workloads as not measured, with this reason.

slotflow and the bare loop run on the project's own .venv. The peers' Python packages go into ONE
virtualenv under .cache/bench/peers-venv, from requirements-peers.txt (pinned), rebuilt only when
that file changes; binaries the peers need are cached under .cache/bench/ as well. Progress goes
to stderr.
"""

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

# The per-peer installers sit beside this file, imported as the `peers` package (bench/ on the path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peers.install_pgpeers import REQUIREMENTS as PG_REQUIREMENTS
from peers.install_pgpeers import install_dbos, install_procrastinate
from peers.install_temporal import install_temporal

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "bench"
PEERS_VENV = CACHE / "peers-venv"
REQUIREMENTS = Path(__file__).resolve().parent / "requirements-peers.txt"

Installed = dict[str, object]


def unavailable(why: str) -> Installed:
    return {"unavailable": why}


def failed_command(command: Sequence[str], error: subprocess.CalledProcessError | OSError) -> Installed:
    """`unavailable`, naming the command (paths shown relative to the checkout) and the end of its
    error output."""
    shown = " ".join(str(part).replace(f"{REPO}/", "") for part in command)
    if isinstance(error, subprocess.CalledProcessError):
        tail = (error.stderr or error.stdout or "").strip().splitlines()[-5:]
        return unavailable(f"`{shown}` exited with {error.returncode}: {' / '.join(tail)}")
    return unavailable(f"`{shown}` could not run: {error}")


def run(command: Sequence[str]) -> None:
    """Run ``command``; its output captured (stdout is this script's JSON), shown on stderr on failure."""
    print(f"install: {' '.join(str(part) for part in command)}", file=sys.stderr, flush=True)
    subprocess.run(command, check=True, capture_output=True, text=True)


def project_venv() -> Installed:
    """slotflow and the bare loop: the project's .venv (made by `make setup`), nothing to install."""
    python = REPO / ".venv" / "bin" / "python"
    if not python.exists():
        return unavailable("the project's .venv is missing: run `make setup`")
    version = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('slotflow-lib'))"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {"python": str(python), "env": {}, "version": version or "this checkout"}


def bare_loop() -> Installed:
    """The bare SKIP LOCKED loop: SQL on the devstack's PostgreSQL, from the project's .venv."""
    installed = project_venv()
    if "python" in installed:
        installed["version"] = "bench/peers/bare.py (asyncpg)"
    return installed


def requirements_digest(text: str) -> str:
    """What the peers' virtualenv was built from: a change to the pins rebuilds it."""
    return hashlib.sha256(text.encode()).hexdigest()


def pinned(text: str) -> dict[str, str]:
    """`name==version` lines of a requirements file, by lower-case name (comments and blanks skipped)."""
    pins = {}
    for line in text.splitlines():
        requirement = line.split("#", 1)[0].strip()
        if "==" in requirement:
            name, version = requirement.split("==", 1)
            pins[name.strip().lower()] = version.strip()
    return pins


def peer_venv(package: str) -> Installed:
    """The peers' shared virtualenv, made or refreshed from requirements-peers.txt; ``package`` must
    be pinned there. Every peer installer starts here and adds what else it needs to the result."""
    text = REQUIREMENTS.read_text()
    version = pinned(text).get(package.lower())
    if version is None:
        return unavailable(f"{package} is not pinned in bench/peers/requirements-peers.txt")
    python = PEERS_VENV / "bin" / "python"
    stamp = PEERS_VENV / ".requirements-sha256"
    digest = requirements_digest(text)
    if not (python.exists() and stamp.exists() and stamp.read_text().strip() == digest):
        commands: list[list[str]] = []
        if not python.exists():
            commands.append([sys.executable, "-m", "venv", str(PEERS_VENV)])
        commands.append([str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)])
        for command in commands:
            try:
                run(command)
            except (subprocess.CalledProcessError, OSError) as error:
                return failed_command(command, error)
        stamp.write_text(digest + "\n")
    return {"python": str(python), "env": {}, "version": f"{package} {version}"}


def with_pinned_version(installed: Installed, package: str, requirements: Path) -> Installed:
    """``installed`` naming the version ``requirements`` pins for ``package`` (the page's systems
    table), unless the install failed."""
    if "unavailable" in installed:
        return installed
    return {**installed, "version": f"{package} {pinned(requirements.read_text()).get(package, 'unpinned')}"}


#: One installer per system the harness knows. A peer's installer usually begins with
#: `peer_venv("<its package>")` and adds binaries or environment to what that returns.
INSTALLERS: dict[str, Callable[[], Installed]] = {
    "slotflow": project_venv,
    "bare": bare_loop,
    # The Temporal CLI (go install, cached) and temporalio in the peers' virtualenv.
    "temporal": lambda: install_temporal(CACHE),
    # dbos and procrastinate from requirements-peers-pg.txt, into the same virtualenv.
    "dbos": lambda: with_pinned_version(install_dbos(CACHE), "dbos", PG_REQUIREMENTS),
    "procrastinate": lambda: with_pinned_version(
        install_procrastinate(CACHE), "procrastinate", PG_REQUIREMENTS
    ),
}


def install(system: str) -> Installed:
    installer = INSTALLERS.get(system)
    if installer is None:
        return unavailable(f"no installer for {system!r} (known: {', '.join(INSTALLERS)})")
    return installer()


def main(argv: Sequence[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 1:
        raise SystemExit(f"usage: install.py <system>  (one of {', '.join(INSTALLERS)})")
    CACHE.mkdir(parents=True, exist_ok=True)
    print(json.dumps(install(args[0])))


if __name__ == "__main__":
    main()
