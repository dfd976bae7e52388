"""`slotflow token create | list | revoke` against the api with authentication on, and what the CLI
says without a token or with one that lacks the scope or was revoked."""

import json

from tests.integration.api.conftest import TEST_TOKEN
from tests.integration.cli.conftest import Cli


async def test_token_lifecycle_through_the_cli(cli: Cli) -> None:
    created = await cli("token", "create", "--name", "oncall", "--scope", "operate")
    assert created.code == 0, created
    secret = created.out.strip()
    assert secret.startswith("sft_")
    assert "\n" not in secret  # stdout is the secret alone: SLOTFLOW_TOKEN=$(slotflow token create ...)
    assert "shown only now" in created.err
    assert secret not in created.err

    listed = await cli("--json", "token", "list")
    assert listed.code == 0, listed
    rows = json.loads(listed.out)
    assert [(r["name"], r["scope"], r["created_by"]) for r in rows] == [("oncall", "operate", "bootstrap")]
    assert secret not in listed.out
    table = await cli("token", "list")
    assert "oncall" in table.out
    assert "operate" in table.out

    as_oncall = cli.env(SLOTFLOW_TOKEN=secret)
    assert (await cli("schedule", "list", env=as_oncall)).code == 0
    refused = await cli("token", "create", "--name", "x", "--scope", "read", env=as_oncall)
    assert refused.code == 1
    assert "needs the 'admin' scope" in refused.err
    assert "token:oncall holds 'operate'" in refused.err

    flag = await cli("--token", secret, "schedule", "list", env=cli.env(SLOTFLOW_TOKEN=""))
    assert flag.code == 0, flag

    duplicate = await cli("token", "create", "--name", "oncall", "--scope", "read")
    assert duplicate.code == 1
    assert "revoke it first" in duplicate.err

    revoked = await cli("token", "revoke", "oncall")
    assert revoked.code == 0, revoked
    assert "revoked token" in revoked.out
    after = await cli("schedule", "list", env=as_oncall)
    assert after.code == 1
    assert "was revoked" in after.err
    assert "the token was refused" in after.err
    gone = await cli("token", "revoke", "oncall")
    assert gone.code == 1
    assert "no live token" in gone.err
    history = json.loads((await cli("--json", "token", "list", "--revoked")).out)
    assert [(r["name"], r["revoked_by"]) for r in history] == [("oncall", "bootstrap")]


async def test_without_a_token_the_cli_says_how_to_give_one(cli: Cli) -> None:
    bare = await cli("schedule", "list", env=cli.env(SLOTFLOW_TOKEN=""))
    assert bare.code == 1
    assert "HTTP 401" in bare.err
    assert "pass --token or set SLOTFLOW_TOKEN" in bare.err
    assert TEST_TOKEN not in bare.err
    help_text = await cli("schedule", "list", "--help")
    assert "SLOTFLOW_TOKEN" in help_text.out
    assert TEST_TOKEN not in help_text.out
