"""`python -m slotflow_orchestrator` (console script `slotflow-orchestrator`): run one orchestrator.

SIGTERM or SIGINT stops it gracefully: the poll in hand is recorded and committed, decisions in
flight commit, the outbox is flushed as far as the relay gets, and the shard leases are released.
A SIGKILL loses nothing either: every decision is one transaction, and inputs not yet recorded
are redelivered by Kafka.

Two subcommands for an operator (docs/operations.md, "Rebuilding the orchestrator"):

- `slotflow-orchestrator rebuild [--force]`: rebuild the orchestrator's schema from the topics
  (`rebuild.py`), every orchestrator stopped; refused while the schema holds state, unless forced.
  Exit 0 when every workflow was restored and decided, 1 when some could not be, 2 when refused.
- `slotflow-orchestrator check`: compare the tables with the history topic; exit 0 when they
  agree, 1 with every difference listed.
"""

import argparse
import asyncio
import sys
from collections.abc import Sequence

from slotflow.errors import SlotflowError
from slotflow.logs import configure_logging
from slotflow.service import serve
from slotflow.tracing import configure_tracing
from slotflow_orchestrator.app import OrchestratorService
from slotflow_orchestrator.config import Settings
from slotflow_orchestrator.rebuild import check, rebuild
from slotflow_orchestrator.workflow_code import load_workflow_code


def _service(settings: Settings) -> OrchestratorService:
    cfg = settings.orchestrator
    workflow_code = load_workflow_code(cfg.modules(), max_history_events=cfg.max_history_events)
    return OrchestratorService(settings, workflow_code=workflow_code)


async def _rebuild(settings: Settings, *, force: bool) -> int:
    cfg = settings.orchestrator
    workflow_code = load_workflow_code(cfg.modules(), max_history_events=cfg.max_history_events)
    report = await rebuild(settings, workflow_code=workflow_code, force=force)
    for line in report.lines():
        print(line)  # noqa: T201 - the command's output
    return 1 if report.problems else 0


async def _check(settings: Settings) -> int:
    report = await check(settings)
    for line in report.lines():
        print(line)  # noqa: T201 - the command's output
    return 0 if report.agree else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slotflow-orchestrator", description="Run an orchestrator, or rebuild or check its schema."
    )
    commands = parser.add_subparsers(dest="command")
    rebuild_ = commands.add_parser(
        "rebuild", help="rebuild the orchestrator's schema from the topics (every orchestrator stopped)"
    )
    rebuild_.add_argument(
        "--force",
        action="store_true",
        help="replace a schema that still holds workflows, history, inputs or unrelayed events",
    )
    commands.add_parser("check", help="compare the orchestrator's tables with the history topic")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging()
    configure_tracing("slotflow-orchestrator")
    settings = Settings()
    if args.command == "rebuild":
        try:
            return asyncio.run(_rebuild(settings, force=args.force))
        except SlotflowError as err:
            print(f"slotflow-orchestrator rebuild: {err}", file=sys.stderr)  # noqa: T201
            return 2
    if args.command == "check":
        try:
            return asyncio.run(_check(settings))
        except SlotflowError as err:
            print(f"slotflow-orchestrator check: {err}", file=sys.stderr)  # noqa: T201
            return 2
    return serve(
        "slotflow-orchestrator", lambda: _service(settings), event_loop=settings.orchestrator.event_loop
    )


if __name__ == "__main__":
    sys.exit(main())
