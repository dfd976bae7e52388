"""Installs the Temporal peer, idempotently: the Temporal CLI (its dev server) and the Python SDK.

    python bench/peers/install_temporal.py [--cache-dir DIR]

- The CLI is a Go program, built from source through the Go module proxy with `go install` into
  ``<cache>/temporal-<version>/`` (about five minutes on two cores); skipped when the binary is
  there. CLI 1.5.1 carries Temporal Server 1.29.1; later CLI releases carry a replace directive that
  `go install` refuses, and the prebuilt archives (and the SDK's own test-server download) need
  hosts this project cannot reach.
- The SDK, temporalio, goes into the peers' virtualenv ``<cache>/peers-venv`` (made with this
  interpreter when missing) at the version pinned in requirements-peers.txt; skipped when that
  version is installed.

Prints one JSON object: {"python": ..., "env": {"TEMPORAL_CLI": ...}, "version": ...} for running the adapter, or
{"unavailable": ...} with the failing command and its error. Exit status 0 for both.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

CLI_VERSION = "1.5.1"
CLI_MODULE = "github.com/temporalio/cli/cmd/temporal"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REQUIREMENTS = HERE / "requirements-peers.txt"
#: The Temporal lines of requirements-peers.txt: the other peers' packages are their installers'.
TEMPORAL_PACKAGES = ("temporalio",)


class InstallError(Exception):
    """A step failed; the message names the command and its error."""


def pinned_requirements(text: str, packages: Sequence[str] = TEMPORAL_PACKAGES) -> list[str]:
    """The pinned lines (``name==version``) of ``packages`` in a requirements file's text."""
    wanted = {name.lower() for name in packages}
    found = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*==\s*(\S+)", line)
        if match and match[1].lower().replace("_", "-") in wanted:
            found.append(f"{match[1]}=={match[2]}")
    missing = wanted - {line.split("==")[0].lower() for line in found}
    if missing:
        raise InstallError(f"{REQUIREMENTS.name} pins no version of {sorted(missing)}")
    return found


def _run(command: Sequence[str], env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, env=env, check=False)
    except OSError as error:
        raise InstallError(f"`{' '.join(command)}` could not run: {error}") from error
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise InstallError(f"`{' '.join(command)}` exited {done.returncode}: {tail}")
    return done.stdout


def install_cli(cache_dir: Path) -> Path:
    """The cached Temporal CLI, built with `go install` when it is not there yet."""
    directory = cache_dir / f"temporal-{CLI_VERSION}"
    binary = directory / "temporal"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    go = shutil.which("go")
    if go is None:
        raise InstallError(f"`go install {CLI_MODULE}@v{CLI_VERSION}` needs Go, and no `go` is on PATH")
    directory.mkdir(parents=True, exist_ok=True)
    _run([go, "install", f"{CLI_MODULE}@v{CLI_VERSION}"], env={**os.environ, "GOBIN": str(directory)})
    if not binary.is_file():
        raise InstallError(f"`go install {CLI_MODULE}@v{CLI_VERSION}` left no binary in {directory}")
    return binary


def install_sdk(cache_dir: Path) -> Path:
    """The peers' virtualenv's interpreter, with the pinned temporalio installed in it."""
    venv = cache_dir / "peers-venv"
    python = venv / "bin" / "python"
    if not python.is_file():
        _run([sys.executable, "-m", "venv", str(venv)])
    pins = pinned_requirements(REQUIREMENTS.read_text())
    installed = _run([str(python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"])
    have = {line.lower().replace("_", "-") for line in installed.split()}
    if any(pin.lower().replace("_", "-") not in have for pin in pins):
        _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins])
    return python


def install_temporal(cache_dir: Path) -> dict[str, object]:
    """The contract's installer object for Temporal: how to run its adapter, or why it cannot run."""
    try:
        binary = install_cli(cache_dir)
        python = install_sdk(cache_dir)
        sdk = ", ".join(pin.replace("==", " ") for pin in pinned_requirements(REQUIREMENTS.read_text()))
        # 'temporal version 0.0.0-DEV (Server 1.29.1, UI 2.42.1)': a go install build does not know
        # its own release, but names the server the dev server runs.
        reported = _run([str(binary), "--version"])
    except InstallError as error:
        return {"unavailable": str(error)}
    server = re.search(r"\((Server [^)]*)\)", reported)
    cli = f"Temporal CLI {CLI_VERSION}" + (f" ({server[1]})" if server else "")
    return {"python": str(python), "env": {"TEMPORAL_CLI": str(binary)}, "version": f"{sdk}; {cli}"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Install the Temporal CLI and SDK for the peer benchmarks.")
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".cache" / "bench")
    args = parser.parse_args(argv)
    print(json.dumps(install_temporal(args.cache_dir.resolve())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
