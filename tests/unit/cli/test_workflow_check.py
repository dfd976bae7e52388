"""`slotflow workflow check`: findings as file:line on stdout and exit 1; clean code exits 0 (for CI)."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from slotflow.cli.__main__ import execute
from slotflow.cli.context import Context
from slotflow.cli.parser import build_parser

SAMPLES = Path(__file__).parents[1] / "workflow" / "samples"
ROOT = Path(__file__).parents[3]


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = execute(Context(build_parser().parse_args(argv), out=out, err=err))
    return code, out.getvalue(), err.getvalue()


def test_findings_are_printed_one_per_line_and_exit_1() -> None:
    code, out, err = run(["workflow", "check", str(SAMPLES / "traps.py")])

    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 32
    assert all(line.startswith(f"{SAMPLES / 'traps.py'}:") for line in lines)
    assert any(
        ": SFW004 uuid.uuid4 makes a host-random or host-clock id in workflow Traps (samples.traps); "
        "instead, use workflow.uuid4()" in line
        for line in lines
    )
    assert "32 determinism findings in 1 workflow classes in 1 files" in err


def test_clean_workflow_code_exits_0_by_dotted_module_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)

    code, out, err = run(["workflow", "check", "tests.unit.workflow.samples.clean"])

    assert (code, out) == (0, "")
    assert "no findings in 1 workflow classes in 1 files" in err


def test_json_lists_every_finding_with_its_place() -> None:
    code, out, _ = run(["workflow", "check", "--json", str(SAMPLES)])

    body = json.loads(out)
    assert code == 1
    assert body["workflows"] == ["Clean (samples.clean)", "Traps (samples.traps)"]
    first = body["findings"][0]
    assert {"path", "line", "column", "code", "name", "why", "instead", "message"} <= set(first)


def test_a_module_without_workflows_or_that_does_not_exist_fails_instead_of_passing_empty() -> None:
    code, _, err = run(["workflow", "check", str(SAMPLES / "__init__.py")])
    assert code == 1
    assert "no workflow classes (decorated with workflow.defn)" in err

    code, _, err = run(["workflow", "check", "no_such_module_anywhere"])
    assert code == 1
    assert "cannot find module 'no_such_module_anywhere'" in err


def test_the_console_script_exits_1_on_findings() -> None:
    # The real entry point, as CI runs it: the exit status is what a pipeline sees.
    done = subprocess.run(
        [sys.executable, "-m", "slotflow.cli", "workflow", "check", str(SAMPLES / "traps.py")],
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 1, done.stderr
    assert "SFW001 datetime.datetime.now" in done.stdout
