"""`workflow check`: the static determinism check of workflow code (`slotflow.workflow.check`), for CI.

Findings go to stdout one per line (`file:line:col: CODE what; instead, ...`), the summary to
stderr; any finding exits 1. Nothing named is imported or run.
"""

from dataclasses import asdict

from slotflow.cli.context import Context
from slotflow.cli.errors import CliError
from slotflow.workflow.check import CheckError, check_modules


class WorkflowCheckFindings(CliError):
    """`workflow check` found determinism traps in workflow code."""


def workflow_check(ctx: Context) -> int:
    """`workflow check`: look for determinism traps in the workflow code of the named modules."""
    targets: list[str] = list(ctx.args.modules)
    try:
        result = check_modules(targets)
    except CheckError as err:
        raise CliError(str(err)) from None
    if not result.workflows:
        # A typo in CI must not pass by checking nothing.
        raise CliError(
            f"no workflow classes (decorated with workflow.defn) in {', '.join(targets)} "
            f"({len(result.files)} files read): nothing was checked"
        )
    if ctx.as_json:
        ctx.emit_json(
            {
                "files": list(result.files),
                "workflows": list(result.workflows),
                "findings": [asdict(f) | {"message": f.format()} for f in result.findings],
            }
        )
    else:
        for finding in result.findings:
            ctx.out.write(finding.format() + "\n")
    summary = f"{len(result.workflows)} workflow classes in {len(result.files)} files"
    if result.findings:
        raise WorkflowCheckFindings(
            f"{len(result.findings)} determinism findings in {summary}; "
            "workflow code must take time, randomness, ids and I/O from the runtime"
        )
    ctx.note(f"workflow check: no findings in {summary}")
    return 0
