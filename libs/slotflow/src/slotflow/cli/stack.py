"""`slotflow stack up|down|status`: run the repository's devstack script with this interpreter."""

import os
import subprocess
import sys
from pathlib import Path

from slotflow.cli.context import Context
from slotflow.cli.errors import CliError

SCRIPT = Path("deploy") / "devstack" / "devstack.py"


def find_devstack(start: Path | None = None) -> Path:
    """deploy/devstack/devstack.py from SLOTFLOW_DEVSTACK_SCRIPT, the working directory up, or this checkout.

    Raises:
        CliError: no devstack script was found (not inside a slotflow checkout).
    """
    override = os.environ.get("SLOTFLOW_DEVSTACK_SCRIPT")
    if override:
        path = Path(override)
        if not path.is_file():
            raise CliError(f"SLOTFLOW_DEVSTACK_SCRIPT={override} does not name a file")
        return path
    roots = [start or Path.cwd(), Path(__file__).resolve()]
    for root in roots:
        for directory in [root, *root.parents]:
            candidate = directory / SCRIPT
            if candidate.is_file():
                return candidate
    raise CliError(
        f"cannot find {SCRIPT}: run this inside a slotflow checkout or set SLOTFLOW_DEVSTACK_SCRIPT"
    )


def stack(ctx: Context) -> int:
    """Hand over to the devstack script; its output and exit code are ours (status: 0 up, 3 down)."""
    argv = [sys.executable, str(find_devstack()), ctx.args.action]
    if getattr(ctx.args, "clean", False):
        argv.append("--clean")
    # The script is our own, run with our interpreter and fixed arguments: no shell, no user input.
    completed = subprocess.run(argv, check=False)  # noqa: S603
    return completed.returncode
