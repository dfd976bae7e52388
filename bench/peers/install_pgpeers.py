"""Installs the PostgreSQL-backed peers, DBOS Transact and procrastinate, into the peers virtualenv.

    python bench/peers/install_pgpeers.py dbos|procrastinate

Prints one JSON object, as every installer of bench/peers does: {"python": ..., "env": {...}} to run
the adapter with, or {"unavailable": "<command and its error>"}; exit 0 either way. Both peers share
the one virtualenv `.cache/bench/peers-venv` (never the project's .venv) and the pinned versions of
`requirements-peers-pg.txt`. Idempotent: a stamp named after the requirements' hash skips pip when
nothing changed, so a second call costs one import check.
"""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = Path(__file__).resolve().parent / "requirements-peers-pg.txt"
# The module each peer's adapter imports, to prove the install usable.
IMPORT_NAMES = {"dbos": "dbos", "procrastinate": "procrastinate"}


def default_cache_dir() -> Path:
    return REPO / ".cache" / "bench"


def venv_python(cache_dir: Path) -> Path:
    return cache_dir / "peers-venv" / "bin" / "python"


def stamp_path(cache_dir: Path, requirements_text: str) -> Path:
    digest = hashlib.sha256(requirements_text.encode()).hexdigest()[:16]
    return cache_dir / "peers-venv" / f".pgpeers-installed-{digest}"


def run(command: list[str]) -> str | None:
    """None when ``command`` succeeds, else the command and the tail of its output."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return None
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
    return f"`{' '.join(command)}` exited {done.returncode}: {tail}"


def ensure_installed(cache_dir: Path) -> str | None:
    """Creates the virtualenv if missing and installs the pinned peers; None on success."""
    python = venv_python(cache_dir)
    if not python.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        error = run([sys.executable, "-m", "venv", str(python.parents[1])])
        if error:
            return error
    stamp = stamp_path(cache_dir, REQUIREMENTS.read_text())
    if stamp.exists():
        return None
    error = run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(REQUIREMENTS)]
    )
    if error:
        return error
    stamp.touch()
    return None


def install(system: str, cache_dir: Path) -> dict[str, object]:
    error = ensure_installed(cache_dir)
    if error is None:
        error = run([str(venv_python(cache_dir)), "-c", f"import {IMPORT_NAMES[system]}"])
    if error is not None:
        return {"unavailable": f"{system} could not be installed: {error}"}
    # The adapters need no extra environment; PYTHONUNBUFFERED keeps worker logs in order.
    return {"python": str(venv_python(cache_dir)), "env": {"PYTHONUNBUFFERED": "1"}}


def install_dbos(cache_dir: Path) -> dict[str, object]:
    return install("dbos", cache_dir)


def install_procrastinate(cache_dir: Path) -> dict[str, object]:
    return install("procrastinate", cache_dir)


def main(argv: list[str]) -> None:
    if len(argv) != 1 or argv[0] not in IMPORT_NAMES:
        sys.exit(f"usage: python bench/peers/install_pgpeers.py {'|'.join(IMPORT_NAMES)}")
    print(json.dumps(install(argv[0], default_cache_dir())), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
