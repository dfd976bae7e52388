"""Before a create or update: does any live claimer serve the handler? (`GET /v1/handlers`)

A typo'd handler is accepted by the ticker and then fails forever; the claimers announce what they
serve, so the CLI can say so first. A warning on stderr by default; with `--strict`, an error
before anything is published (also when the API cannot be asked).
"""

from typing import Any

from slotflow.cli.context import Context
from slotflow.cli.errors import CliError


def served_by(body: Any, handler: str) -> tuple[bool, list[str]]:
    """(served, every handler the live claimers serve) from a `/v1/handlers` answer."""
    items = body.get("handlers") if isinstance(body, dict) else None
    names = [str(item.get("name")) for item in items or [] if isinstance(item, dict)]
    return handler in names, names


def check_handler(ctx: Context, handler: str) -> None:
    """Warn (or with --strict, fail) when no live claimer serves ``handler``.

    Raises:
        CliError: --strict, and the handler is not served or the API could not be asked.
    """
    strict = bool(getattr(ctx.args, "strict", False))
    try:
        with ctx.api() as api:
            body = api.get("/v1/handlers")
    except CliError as err:
        if strict:
            raise CliError(f"--strict: cannot ask the API which handlers are served ({err})") from None
        ctx.note(f"warning: cannot check that a claimer serves {handler!r} ({err})")
        return
    served, names = served_by(body, handler)
    if served:
        return
    message = (
        f"no live claimer serves handler {handler!r}: its runs would fail until one does "
        f"(served: {', '.join(names) if names else 'none: no live claimer has announced itself'})"
    )
    if strict:
        raise CliError(f"{message}; nothing was published (--strict)")
    ctx.note(f"warning: {message}")
