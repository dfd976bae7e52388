"""The `slotflow` script as a person runs it: commands reach Kafka through the api (or signed,
straight), queries read the api, failures are one line on stderr with exit code 1 (or 2 for bad
usage), never a traceback."""

import json
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from slotflow.contracts import REGISTRY, CreateSchedule, CronSpec
from slotflow.contracts.topics import DLQ_COMMANDS, SCHEDULE_COMMANDS, WORKFLOW_COMMANDS
from slotflow.core.identity import run_id
from slotflow.pg.pool import Pool
from slotflow.principals.signing import write_private_key
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.topics import TopicTail
from slotflow_api.config import Settings
from tests.integration.api.conftest import AUTH
from tests.integration.cli.conftest import SCRIPT, Cli, Outcome
from tests.integration.cli.support import (
    DEAD_LETTERS,
    PAYOUTS,
    STATEMENTS,
    WORKFLOW,
    build_scene,
    produce_live,
    project_scene,
)
from tests.integration.ticker.support import tickers


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _ok(outcome: Outcome) -> Outcome:
    assert outcome.code == 0, outcome
    assert "Traceback" not in outcome.err
    return outcome


async def _published(kafka: KafkaSettings, expected: set[str]) -> dict[str, Any]:
    """Envelopes on the three command topics, by id, once every id in ``expected`` is there."""
    async with TopicTail(kafka, [SCHEDULE_COMMANDS, WORKFLOW_COMMANDS, DLQ_COMMANDS]) as tail:

        def found() -> dict[str, Any] | None:
            by_id = tail.indexed()
            return by_id if expected <= set(by_id) else None

        result: dict[str, Any] = await assert_eventually(
            found, timeout=30, message="commands on their topics"
        )
        return result


async def test_every_command_reaches_its_topic_with_its_key(cli: Cli, kafka: KafkaSettings) -> None:
    commands = {
        "c-create": [
            "--json", "schedule", "create", "payouts", "--cron", "0 2 * * *", "--tz", "Europe/Berlin",
            "--handler", "payouts.pay", "--payload", '{"currency": "EUR"}', "--misfire", "fire_all",
            "--max-attempts", "3", "--non-retryable", "CardDeclined", "--tag", "money-moving", "--paused",
        ],
        "c-update": ["schedule", "update", "payouts", "--every", "15m", "--handler", "payouts.v2"],
        "c-pause": ["schedule", "pause", "payouts", "--reason", "bank maintenance", "--resume-at", "2030-01-01T00:00:00Z"],
        "c-resume": ["schedule", "resume", "payouts"],
        "c-trigger": ["schedule", "trigger", "payouts"],
        "c-backfill": ["schedule", "backfill", "payouts", "--start", "2026-01-01T00:00:00Z", "--end", "2026-01-02T00:00:00Z", "--max-slots", "24"],
        "c-delete": ["schedule", "delete", "payouts"],
        "c-start": ["workflow", "start", "order-1", "--type", "orders.checkout", "--input", '{"order": 1}', "--execution-timeout", "90", "--id-reuse-policy", "allow_after_close"],
        "c-signal": ["workflow", "signal", "order-1", "approve", "--payload", '{"by": "ops"}'],
        "c-cancel": ["workflow", "cancel", "order-1", "--reason", "customer asked"],
        "c-terminate": ["workflow", "terminate", "order-1", "--reason", "stuck"],
        "c-redrive": ["dlq", "redrive", "--id", "t:0:1"],
        "c-discard": ["dlq", "discard", "--source", "claimer", "--failure-reason", "invalid_payload", "--reason", "bad data", "--limit", "10"],
    }  # fmt: skip
    outcomes = await cli.many(*([*argv, "--command-id", command_id] for command_id, argv in commands.items()))
    for outcome in outcomes:
        _ok(outcome)
    created = json.loads(outcomes[0].out)
    assert created == {
        "command_id": "c-create",
        "type": "schedule.create",
        "topic": kafka.topic(SCHEDULE_COMMANDS),
        "key": "payouts",
    }
    assert "command_id: c-update" in outcomes[1].out
    assert f"topic:      {kafka.topic(SCHEDULE_COMMANDS)}" in outcomes[1].out

    seen = await _published(kafka, set(commands))
    topics = {command_id: seen[command_id][0].topic for command_id in commands}
    assert {
        topics[c]
        for c in ("c-create", "c-update", "c-pause", "c-resume", "c-trigger", "c-backfill", "c-delete")
    } == {kafka.topic(SCHEDULE_COMMANDS)}
    assert {topics[c] for c in ("c-start", "c-signal", "c-cancel", "c-terminate")} == {
        kafka.topic(WORKFLOW_COMMANDS)
    }
    assert {topics[c] for c in ("c-redrive", "c-discard")} == {kafka.topic(DLQ_COMMANDS)}
    envelopes = {command_id: seen[command_id][1] for command_id in commands}
    assert {
        envelopes[c].key
        for c in commands
        if c.startswith("c-") and topics[c] == kafka.topic(SCHEDULE_COMMANDS)
    } == {"payouts"}
    # Through the api (the default): published by the api, for the caller its token names (the
    # bootstrap token here), signed with the api's own key.
    assert all(envelope.source == "api" for envelope in envelopes.values())
    assert all(envelope.principal == "bootstrap" for envelope in envelopes.values())
    assert all(envelope.proof is not None for envelope in envelopes.values())

    create = REGISTRY.parse(envelopes["c-create"])
    assert isinstance(create, CreateSchedule)
    assert create.paused is True
    assert create.definition.spec == CronSpec(expression="0 2 * * *", timezone="Europe/Berlin")
    assert create.definition.payload == {"currency": "EUR"}
    assert create.definition.misfire.policy == "fire_all"
    assert create.definition.retry.max_attempts == 3
    assert create.definition.retry.non_retryable == ("CardDeclined",)
    assert create.definition.tags == ("money-moving",)
    # Only what the flags name: no payload, tags or policies the ticker would reset.
    assert envelopes["c-update"].data["patch"] == {
        "spec": {"kind": "interval", "every": "PT15M"},
        "handler": "payouts.v2",
    }
    assert envelopes["c-update"].data["definition"] is None
    assert envelopes["c-pause"].data == {
        "schedule_id": "payouts",
        "reason": "bank maintenance",
        "resume_at": "2030-01-01T00:00:00Z",
    }
    assert envelopes["c-backfill"].data["max_slots"] == 24
    assert envelopes["c-start"].data == {
        "workflow_id": "order-1",
        "workflow_type": "orders.checkout",
        "input": {"order": 1},
        "id_reuse_policy": "allow_after_close",
        "execution_timeout": "PT1M30S",
        "parent_workflow_id": None,
        "parent_sequence": None,
        "parent_close_policy": "request_cancel",
    }
    assert envelopes["c-signal"].data == {
        "workflow_id": "order-1",
        "signal": "approve",
        "payload": {"by": "ops"},
    }
    assert envelopes["c-cancel"].key == "order-1"
    assert envelopes["c-terminate"].type == "workflow.terminate"
    assert envelopes["c-terminate"].data == {"workflow_id": "order-1", "reason": "stuck"}
    assert envelopes["c-redrive"].key == "t:0:1"
    assert envelopes["c-redrive"].data["selection"]["ids"] == ["t:0:1"]
    selection = envelopes["c-discard"].data["selection"]
    assert (selection["source_service"], selection["reason"]) == ("claimer", "invalid_payload")
    assert not any(value for name, value in selection.items() if name not in ("source_service", "reason"))
    assert envelopes["c-discard"].data["reason"] == "bad data"


async def test_a_schedule_created_from_the_cli_is_fired_by_the_ticker_and_shown_by_the_api(
    cli: Cli, kafka: KafkaSettings, pg_dsn: str, api_url: str
) -> None:
    # Nobody consumes the command topic yet: --wait reports the command as still open, exit 0.
    unanswered = _ok(
        await cli("--json", "schedule", "trigger", "cli-tick", "--wait", "1", "--command-id", "w-open")
    )
    assert json.loads(unanswered.out)["status"] in ("unknown", "pending")
    assert "is still" in unanswered.err

    async with tickers(kafka, pg_dsn):
        create = ["schedule", "create", "cli-tick", "--every", "1s", "--handler", "demo.tick", "--wait", "30"]
        created = _ok(await cli(*create))
        assert "status:     accepted" in created.out

        async with httpx.AsyncClient(base_url=api_url, headers=AUTH) as http:

            async def two_runs() -> bool:
                body = (await http.get("/v1/runs", params={"job_id": "cli-tick"})).json()
                return len(body["items"]) >= 2

            await assert_eventually(two_runs, timeout=30, message="the ticker's JobDue projected")

        listed, shown, again = await cli.many(
            ["--json", "runs", "list", "--schedule", "cli-tick", "--from", "now-1h", "--to", "now+1m"],
            ["schedule", "show", "cli-tick"],
            create,
        )
        runs = json.loads(_ok(listed).out)["items"]
        assert len(runs) >= 2
        assert all(run["run_id"].startswith("cli-tick@") for run in runs)
        assert "every 1s" in _ok(shown).out
        assert "next slots:\n  " in shown.out
        # The ticker refuses a second create of the same id; the CLI says so and exits 1.
        assert again.code == 1, again
        # No claimer runs in this test: the warning about its handler comes first.
        assert "warning: no live claimer serves handler 'demo.tick'" in again.err
        assert again.err.splitlines()[-1].startswith("slotflow: error: command cmd-")
        assert "was rejected: " in again.err
        assert "Traceback" not in again.err
        paused = _ok(await cli("schedule", "pause", "cli-tick", "--reason", "enough", "--wait", "30"))
        assert "status:     accepted" in paused.out


async def test_queries_print_tables_or_json(
    cli: Cli, api_settings: Settings, pg_pool: Pool, api_url: str
) -> None:
    scene = build_scene()
    await project_scene(pg_pool, api_settings.api.db_schema, scene.facts)
    await produce_live(api_settings.kafka, scene.now, scene.hour)
    async with httpx.AsyncClient(base_url=api_url, headers=AUTH) as http:

        async def projected() -> bool:
            return (
                len((await http.get("/v1/dlq")).json()["items"]) == 2
                and len((await http.get("/v1/schedules")).json()["items"]) == 3
            )

        await assert_eventually(projected, timeout=30)

    retried = run_id(PAYOUTS, scene.hour - timedelta(hours=6))
    start = (scene.hour - timedelta(hours=9)).isoformat()
    # Up to the scene's newest slot's hour only: in the first two minutes of an hour the scene ends
    # an hour back, and a range to now would hold the new hour's slot, which no scene fact covers.
    end = min(scene.now, scene.hour + timedelta(minutes=59)).isoformat()
    (
        listing,
        paused,
        show,
        runs,
        run,
        workflow,
        history,
        replay,
        dlq,
        letter,
        audit,
        missing,
    ) = await cli.many(
        ["schedule", "list"],
        ["--json", "schedule", "list", "--paused"],
        ["schedule", "show", PAYOUTS],
        ["runs", "list", "--schedule", PAYOUTS, "--from", start, "--to", end, "--json"],
        ["runs", "show", retried],
        ["workflow", "show", WORKFLOW],
        ["workflow", "history", WORKFLOW],
        ["replay", WORKFLOW, "--json"],
        ["dlq", "list"],
        ["dlq", "show", DEAD_LETTERS[1]],
        ["audit", PAYOUTS, "--from", start, "--to", end, "--check"],
        ["schedule", "show", "no-such-schedule"],
    )
    lines = _ok(listing).out.splitlines()
    assert lines[0].split()[:3] == ["SCHEDULE", "SPEC", "HANDLER"]
    assert len(lines) == 4
    assert any(line.startswith(STATEMENTS) and "paused (bank maintenance)" in line for line in lines)
    assert [item["schedule_id"] for item in json.loads(_ok(paused).out)["items"]] == [STATEMENTS]
    assert "spec:      cron 0 * * * * (UTC)" in _ok(show).out
    assert _ok(show).out.count("\n  20") == 5
    assert len(json.loads(_ok(runs).out)["items"]) == 7
    assert "TimeoutError: bank API timed out" in _ok(run).out
    assert "claimer-2" in run.out
    # The run page in text: the payload, then per attempt its log lines and traceback.
    assert "payload:" in run.out
    assert "attempt 1 (fence 1, claimer-1): retrying TimeoutError: bank API timed out" in run.out
    assert "INFO payouts: attempt 1: paying merchant m-1042" in run.out
    assert '      File "payouts.py", line 12, in pay' in run.out
    # Completed: the run itself shows its result only; the retried attempt's error is the attempt's.
    assert not [line for line in run.out.splitlines() if line.startswith("error:")], run.out
    shown = _ok(workflow).out
    assert "status:           compensating" in shown
    assert "current step:     inventory.release" in shown
    undo = [line.split() for line in shown.split("newest first):\n")[1].splitlines()[1:3]]
    assert [(row[0], row[2], row[3], row[4]) for row in undo] == [
        ("#5", "payments.refund", "done", "7"),
        ("#2", "inventory.release", "running", "4"),
    ]
    assert "workflow.compensation_registered" in _ok(history).out
    assert "to undo #5: payments.refund" in history.out
    assert "#11 failed: NoCarrier: no carrier serves 10115 (permanent)" in history.out
    plan = json.loads(_ok(replay).out)
    assert plan["status"] == "compensating"
    assert plan["code_checked"] is False
    assert plan["non_determinism"] is None
    by_sequence = {d["sequence"]: d for d in plan["decisions"]}
    assert by_sequence[2]["hands_back"] == 'result {"hold":"H-77"}'
    assert by_sequence[8]["decision"] == "sleep"
    assert by_sequence[10]["hands_back"] == 'payload {"zip":"10115"}'
    assert by_sequence[11]["hands_back"] == "raises NoCarrier: no carrier serves 10115"
    assert by_sequence[15]["hands_back"].startswith("nothing yet")
    assert "add --module MODULE to replay it against workflow code" in replay.err
    assert len(_ok(dlq).out.splitlines()) == 3
    assert "card declined by issuer" in _ok(letter).out
    # The letter of a dead-lettered run carries the run's attempt history with its traceback.
    assert "attempt 1 (fence 1, claimer-1): dead_lettered CardDeclined: card declined by issuer" in letter.out
    assert "    CardDeclined: card declined by issuer" in letter.out
    assert audit.code == 1, audit
    assert "missed=1" in audit.out
    assert "duplicated_effect=1" in audit.out
    assert "1 missed and 1 duplicated-effect" in audit.err
    # --from before the schedule existed: audited from its creation, and the output says so.
    assert "note: " in audit.out
    assert "created at" in audit.out
    assert (missing.code, missing.err) == (1, "slotflow: error: schedule no-such-schedule not found\n")


async def test_failures_are_one_line_messages_with_exit_codes(kafka: KafkaSettings, tmp_path: Path) -> None:
    cli = Cli(kafka, f"http://127.0.0.1:{_closed_port()}")
    key_file = tmp_path / "ops.pem"
    write_private_key(key_file, Ed25519PrivateKey.generate())
    signed = cli.env(SLOTFLOW_SIGNING_KEY_FILE=str(key_file), SLOTFLOW_SIGNING_PRINCIPAL="key:ops")
    no_kafka = {**signed, "SLOTFLOW_KAFKA_BOOTSTRAP": f"127.0.0.1:{_closed_port()}"}
    assert SCRIPT.exists(), f"{SCRIPT} missing: run `make setup`"
    kafka_down = await cli("--via", "kafka", "schedule", "trigger", "payouts", env=no_kafka)
    waited = await cli(
        "--via",
        "kafka",
        "schedule",
        "trigger",
        "payouts",
        "--wait",
        "5",
        "--command-id",
        "c-wait-no-api",
        env=signed,
    )
    api_down, command_api_down, unsigned, bad_cron, bad_zone, bad_json = await cli.many(
        ["schedule", "list"],
        ["schedule", "trigger", "payouts"],
        ["--via", "kafka", "schedule", "trigger", "payouts"],
        ["schedule", "create", "x", "--cron", "61 * * * *", "--handler", "h"],
        ["schedule", "create", "x", "--cron", "0 * * * *", "--tz", "Mars/Olympus", "--handler", "h"],
        ["workflow", "start", "w", "--type", "t", "--input", "{not json"],
    )
    # Commands go through the api unless told otherwise: with the api down, nothing is sent.
    assert command_api_down.code == 1
    assert "cannot reach the slotflow API" in command_api_down.err
    # Straight to Kafka only as a proven principal: no key, no command.
    assert unsigned.code == 2
    assert "--via kafka sends commands as a proven principal" in unsigned.err
    assert kafka_down.code == 1
    assert "cannot reach Kafka at 127.0.0.1:" in kafka_down.err
    assert api_down.code == 1
    assert "cannot reach the slotflow API" in api_down.err
    assert (bad_cron.code, bad_zone.code, bad_json.code) == (2, 2, 2)
    assert "invalid cron expression" in bad_cron.err
    assert "not a known IANA time zone" in bad_zone.err
    assert "--input is not valid JSON" in bad_json.err
    assert waited.code == 1
    assert "command c-wait-no-api was published to" in waited.err
    for outcome in (kafka_down, api_down, command_api_down, unsigned, bad_cron, bad_zone, bad_json, waited):
        assert "Traceback" not in outcome.err
        assert outcome.err.count("\n") <= 3, outcome.err
    seen = await _published(kafka, {"c-wait-no-api"})
    assert seen["c-wait-no-api"][1].type == "schedule.trigger"
    assert seen["c-wait-no-api"][1].principal == "key:ops"
    assert seen["c-wait-no-api"][1].proof is not None


async def test_stack_status_runs_the_devstack_script_and_passes_its_exit_code(
    kafka: KafkaSettings, tmp_path: Path
) -> None:
    # An empty state directory: the script reports both parts down (3) without touching the shared stack.
    cli = Cli(kafka, f"http://127.0.0.1:{_closed_port()}")
    down = await cli("stack", "status", env=cli.env(SLOTFLOW_DEVSTACK_DIR=str(tmp_path)))
    assert down.code == 3, down
    assert "kafka" in down.out
    assert "postgres" in down.out
    assert str(tmp_path) in down.out
    missing = await cli("stack", "status", env=cli.env(SLOTFLOW_DEVSTACK_SCRIPT=str(tmp_path / "nope.py")))
    assert (missing.code, missing.err) == (
        1,
        f"slotflow: error: SLOTFLOW_DEVSTACK_SCRIPT={tmp_path / 'nope.py'} does not name a file\n",
    )


async def test_a_value_no_service_could_store_is_refused_before_anything_is_published(
    cli: Cli, kafka: KafkaSettings
) -> None:
    # Before the acceptance rule a NUL in --payload was published, taken by the ticker and fired,
    # while the api could not store the schedule; NaN was stored as null by the ticker alone.
    nul, nan, deep = await cli.many(
        ["schedule", "create", "nul", "--cron", "0 * * * *", "--handler", "h.x", "--payload", '{"note": "a\\u0000b"}', "--command-id", "c-nul"],
        ["workflow", "signal", "w/child/2", "go", "--payload", '{"amount": NaN}', "--command-id", "c-nan"],
        ["workflow", "start", "w/1", "--type", "t.x", "--input", '{"n":' * 100 + "1" + "}" * 100, "--command-id", "c-deep"],
    )  # fmt: skip
    assert (nul.code, nan.code, deep.code) == (2, 2, 2), (nul, nan, deep)
    assert "definition.payload.note: contains a NUL character (U+0000)" in nul.err
    assert "payload.amount: holds nan, which is not a JSON number" in nan.err
    assert "input: is nested 100 levels deep; the limit is 99" in deep.err
    for outcome in (nul, nan, deep):
        assert "Traceback" not in outcome.err
    # A good command after them is the first and only one on the topics.
    _ok(
        await cli(
            "schedule", "create", "fine", "--cron", "0 * * * *", "--handler", "h.x", "--command-id", "c-ok"
        )
    )
    seen = await _published(kafka, {"c-ok"})
    assert not {"c-nul", "c-nan", "c-deep"} & set(seen)
