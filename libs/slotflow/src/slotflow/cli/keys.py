"""`slotflow key create | list | revoke`: the signing keys of principals, through the API (admin).

A key proves the principal `key:NAME` on commands sent straight to Kafka (`--via kafka`): the key
pair is made here, only its public half is sent to the API, and the private half is written to a
file readable by its owner alone (docs/security.md, "Signed commands").
"""

from collections.abc import Sequence
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from slotflow.cli.api import path_segment
from slotflow.cli.context import Context
from slotflow.cli.errors import ApiRequestFailed, CliError, UsageError
from slotflow.cli.output import Column, field, text
from slotflow.principals.signing import KeyFileError, MalformedKey, decode_public_key, encode_public_key
from slotflow.principals.signing import write_private_key as write_key_file

KEY_COLUMNS: Sequence[Column] = (
    ("id", field("key_id")),
    ("name", field("name")),
    ("principal", field("principal")),
    ("scope", field("scope")),
    ("created", field("created_at")),
    ("by", field("created_by")),
    ("revoked", field("revoked_at")),
)


def key_create(ctx: Context) -> int:
    """`key create --name NAME --scope SCOPE [--out FILE | --public-key KEY]`."""
    a = ctx.args
    out: Path | None = None
    if a.public_key is not None:
        if a.out is not None:
            raise UsageError(
                "--out writes a key made here; with --public-key the private half is yours already"
            )
        try:
            public_key = encode_public_key(decode_public_key(a.public_key))
        except MalformedKey as err:
            raise UsageError(f"--public-key: {err}") from None
    else:
        out = Path(a.out) if a.out is not None else Path(f"slotflow-key-{a.name}.pem")
        key = Ed25519PrivateKey.generate()
        public_key = encode_public_key(key.public_key())
        # Written first (never over an existing file), so a registered key always has its private
        # half somewhere; removed again if the API refuses the registration.
        try:
            write_key_file(out, key)
        except KeyFileError as err:
            raise CliError(str(err)) from None
    body = {"name": a.name, "scope": a.scope, "public_key": public_key}
    try:
        with ctx.api() as api:
            try:
                row = api.request("POST", "/v1/keys", json=body)
            except ApiRequestFailed as err:
                if err.status == 409:
                    raise CliError(err.detail) from None
                raise
    except CliError:
        if out is not None:
            out.unlink(missing_ok=True)
        raise
    if ctx.as_json:
        ctx.emit_json({**row, "key_file": str(out) if out is not None else None})
        return 0
    pairs = [(name, text(row.get(name))) for name in ("key_id", "name", "principal", "scope")]
    if out is not None:
        pairs.append(("key_file", str(out)))
    ctx.emit_fields(pairs)
    if out is not None:
        ctx.note(
            f"the private key is in {out} (readable by you only; keep it secret). Send commands with it:\n"
            f"  export SLOTFLOW_SIGNING_KEY_FILE={out} SLOTFLOW_SIGNING_PRINCIPAL={row['principal']}\n"
            "  slotflow --via kafka schedule trigger ..."
        )
    return 0


def key_list(ctx: Context) -> int:
    """`key list [--revoked]`: the keys' public halves, who holds them, their scope."""
    with ctx.api() as api:
        rows = api.get("/v1/keys", {"revoked": bool(ctx.args.revoked)})
    if ctx.as_json:
        ctx.emit_json(rows)
        return 0
    ctx.emit_table(list(rows), KEY_COLUMNS, empty="no signing keys")
    return 0


def key_revoke(ctx: Context) -> int:
    """`key revoke ID_OR_NAME`: every service refuses commands signed with it from now on."""
    which = str(ctx.args.which)
    with ctx.api() as api:
        try:
            body = api.request("DELETE", f"/v1/keys/{path_segment(which)}")
        except ApiRequestFailed as err:
            if err.status == 404:
                raise CliError(f"no live key has the id or name {which!r}") from None
            raise
    if ctx.as_json:
        ctx.emit_json(body)
        return 0
    ctx.out.write(f"revoked key {text(body.get('key_id'))} ({text(body.get('principal'))})\n")
    return 0
