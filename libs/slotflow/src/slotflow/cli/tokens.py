"""`slotflow token create | list | revoke`: the API's bearer tokens, through the API (admin scope).

The first token comes from the api's bootstrap token (SLOTFLOW_API_BOOTSTRAP_TOKEN): pass it as
--token (or SLOTFLOW_TOKEN) to create the real ones, then unset it (docs/security.md).
"""

from collections.abc import Sequence

from slotflow.cli.api import path_segment
from slotflow.cli.context import Context
from slotflow.cli.errors import ApiRequestFailed, CliError
from slotflow.cli.output import Column, field, text

TOKEN_COLUMNS: Sequence[Column] = (
    ("id", field("token_id")),
    ("name", field("name")),
    ("scope", field("scope")),
    ("created", field("created_at")),
    ("by", field("created_by")),
    ("last used", field("last_used_at")),
    ("revoked", field("revoked_at")),
)


def token_create(ctx: Context) -> int:
    """`token create --name NAME --scope SCOPE`: the secret on stdout, once; the rest on stderr."""
    a = ctx.args
    with ctx.api() as api:
        try:
            body = api.request("POST", "/v1/tokens", json={"name": a.name, "scope": a.scope})
        except ApiRequestFailed as err:
            if err.status == 409:
                raise CliError(err.detail) from None
            raise
    if ctx.as_json:
        ctx.emit_json(body)
        return 0
    # stdout holds only the secret, so `SLOTFLOW_TOKEN=$(slotflow token create ...)` works.
    ctx.out.write(f"{body['secret']}\n")
    ctx.note(
        f"created token {body['token_id']} ({body['name']}, scope {body['scope']}); the secret above "
        "is shown only now: store it (e.g. as SLOTFLOW_TOKEN) in a secret manager"
    )
    return 0


def token_list(ctx: Context) -> int:
    """`token list [--revoked]`: the tokens, never their secrets."""
    with ctx.api() as api:
        rows = api.get("/v1/tokens", {"revoked": bool(ctx.args.revoked)})
    if ctx.as_json:
        ctx.emit_json(rows)
        return 0
    ctx.emit_table(list(rows), TOKEN_COLUMNS, empty="no tokens")
    return 0


def token_revoke(ctx: Context) -> int:
    """`token revoke ID_OR_NAME`: refused by the API from now on."""
    token = str(ctx.args.which)
    with ctx.api() as api:
        try:
            body = api.request("DELETE", f"/v1/tokens/{path_segment(token)}")
        except ApiRequestFailed as err:
            if err.status == 404:
                raise CliError(f"no live token has the id or name {token!r}") from None
            raise
    if ctx.as_json:
        ctx.emit_json(body)
        return 0
    ctx.out.write(f"revoked token {text(body.get('token_id'))} ({text(body.get('name'))})\n")
    return 0
