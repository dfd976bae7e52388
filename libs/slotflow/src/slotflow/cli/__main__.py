"""Entry point of the `slotflow` console script."""

import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from slotflow.cli.errors import EXIT_FAILURE, EXIT_USAGE, CliError
from slotflow.cli.parser import build_parser
from slotflow.errors import SlotflowError

if TYPE_CHECKING:
    from slotflow.cli.context import Context, Handler

EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the chosen handler, map every failure to a message and an exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        # argparse has already printed the usage error (2) or the help (0).
        return stop.code if isinstance(stop.code, int) else EXIT_FAILURE
    if not os.environ.get("SLOTFLOW_DEBUG"):
        # aiokafka logs every failed connection attempt; the CLI says once what failed and what to do.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    from slotflow.cli.context import Context  # after parsing: usage errors never pay for it

    return execute(Context(args))


def resolve(name: str) -> "Handler":
    """The handler named `"module:function"` (the parser names handlers instead of importing them)."""
    module, _, function = name.partition(":")
    handler: Handler = getattr(importlib.import_module(module), function)
    return handler


def execute(ctx: "Context") -> int:
    """Run the handler chosen in ``ctx.args``; a failure is one line on stderr and an exit code."""
    # Here, not at the top: a usage error caught while parsing never pays for importing pydantic.
    from pydantic import ValidationError

    from slotflow.cli.values import explain

    try:
        code: int = resolve(ctx.args.handler_name)(ctx)
    except CliError as err:
        ctx.err.write(f"slotflow: error: {err}\n")
        return err.exit_code
    except SlotflowError as err:
        ctx.err.write(f"slotflow: error: {err}\n")
        return EXIT_FAILURE
    except ValidationError as err:
        # A command its message model refuses (a NUL in --payload, a value nested too deep: the
        # acceptance rule every service applies): the flags' fault, said as the field and the
        # problem, and nothing is published.
        ctx.err.write(f"slotflow: error: invalid {err.title}: {explain(err)}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader (`| head`) went away; silence the flush at exit instead of a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE
    except Exception as err:  # the last line before a person: a message, not a traceback
        if os.environ.get("SLOTFLOW_DEBUG"):
            raise
        ctx.err.write(
            f"slotflow: internal error: {type(err).__name__}: {err} (set SLOTFLOW_DEBUG=1 for the traceback)\n"
        )
        return EXIT_FAILURE
    return code


if __name__ == "__main__":
    sys.exit(main())
