"""`slotflow replay --file ... --module ...`: recorded histories against current code, exit 1 on a
mismatch with its diff; the history is checked before it is replayed."""

import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from slotflow.cli.__main__ import execute
from slotflow.cli.context import Context
from slotflow.cli.parser import build_parser
from slotflow.contracts import NonDeterminismDetected
from tests.unit.cli.replay_samples import recorded
from tests.unit.cli.replay_samples.recorder import envelopes, record

ROOT = Path(__file__).parents[3]
SAMPLES = "tests.unit.cli.replay_samples"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # Modules are named as a claimer names them: importable from the working directory.
    monkeypatch.chdir(ROOT)


def run(argv: list[str], api: httpx.MockTransport | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = execute(Context(build_parser().parse_args(argv), out=out, err=err, api_transport=api))
    return code, out.getvalue(), err.getvalue()


def histories(tmp_path: Path, *extra: dict[str, Any]) -> Path:
    """Two recorded `samples.pay` runs and one `samples.refund`, as envelopes in one file."""
    entries = [
        *envelopes(record(recorded.Pay, "samples.pay", "order-1", {"id": 1})),
        *envelopes(record(recorded.Refund, "samples.refund", "refund-1", {"id": 1})),
        *envelopes(record(recorded.Pay, "samples.pay", "order-2", {"id": 2})),
        *extra,
    ]
    path = tmp_path / "histories.json"
    path.write_text(json.dumps(entries))
    return path


def test_the_recording_code_replays_every_history_and_exits_0(tmp_path: Path) -> None:
    code, out, err = run(["replay", "--file", str(histories(tmp_path)), "--module", f"{SAMPLES}.recorded"])

    assert code == 0, err
    assert out.splitlines() == [
        "ok  order-1  samples.pay  8 events, completed",
        "ok  refund-1  samples.refund  4 events, completed",
        "ok  order-2  samples.pay  8 events, completed",
    ]
    assert "replayed 3 histories (20 events)" in err
    assert "every decision matches" in err


def test_a_renamed_activity_exits_1_with_the_diff_of_the_first_mismatch(tmp_path: Path) -> None:
    path = histories(tmp_path)

    code, out, err = run(
        ["replay", "--file", str(path), "--type", "samples.pay", "--module", f"{SAMPLES}.renamed"]
    )

    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "MISMATCH  order-1  samples.pay"
    assert lines[1] == "  sequence: 6"
    assert "payments.capture" in lines[2]
    assert lines[2].startswith("  expected: ")
    assert "payments.charge" in lines[3]
    assert lines[3].startswith("  got: ")
    assert "order-2" not in out  # the first mismatch stops the replay
    assert "workflow order-1 does not replay at sequence 6" in err


def test_json_output_carries_the_diff(tmp_path: Path) -> None:
    code, out, _ = run(
        [
            "--json",
            "replay",
            "--file",
            str(histories(tmp_path)),
            "--type",
            "samples.pay",
            "--module",
            f"{SAMPLES}.renamed",
        ]
    )

    assert code == 1
    mismatch = json.loads(out)["mismatch"]
    assert (mismatch["workflow_id"], mismatch["sequence"]) == ("order-1", 6)
    assert "payments.capture" in mismatch["expected"]
    assert "payments.charge" in mismatch["got"]


def test_a_patched_change_replays_old_histories(tmp_path: Path) -> None:
    code, _, err = run(
        [
            "replay",
            "--file",
            str(histories(tmp_path)),
            "--type",
            "samples.pay",
            "--module",
            f"{SAMPLES}.patched",
        ]
    )

    assert code == 0, err


def test_filters_pick_histories_by_type_and_id(tmp_path: Path) -> None:
    path = str(histories(tmp_path))
    module = f"{SAMPLES}.recorded"

    _, by_type, _ = run(["replay", "--file", path, "--type", "samples.refund", "--module", module])
    _, by_id, _ = run(["replay", "--file", path, "--workflow-id", "order-2", "--module", module])
    code, _, err = run(["replay", "--file", path, "--workflow-id", "nobody", "--module", module])

    assert [line.split()[1] for line in by_type.splitlines()] == ["refund-1"]
    assert [line.split()[1] for line in by_id.splitlines()] == ["order-2"]
    assert (code, "no recorded history matches") == (1, err.split(": ", 2)[-1][:27])


def test_a_history_with_a_gap_fails_its_check_before_any_replay(tmp_path: Path) -> None:
    entries = [
        e
        for e in envelopes(record(recorded.Pay, "samples.pay", "order-1", {"id": 1}))
        if e["id"] != "order-1#4"
    ]
    path = tmp_path / "gap.json"
    path.write_text(json.dumps(entries))

    code, _, err = run(["replay", "--file", str(path), "--module", f"{SAMPLES}.recorded"])

    assert code == 1
    assert "workflow order-1: history has a gap after #3 (next is #5)" in err


def test_an_open_non_determinism_that_this_code_resolves_is_reported(tmp_path: Path) -> None:
    stuck = NonDeterminismDetected(
        workflow_id="order-9", sequence=3, at_sequence=2, expected="activity payments.authorize", got="x"
    )
    recorded_run = envelopes(record(recorded.Pay, "samples.pay", "order-9", {"id": 9}))[:2]
    path = tmp_path / "stuck.json"
    path.write_text(json.dumps({"items": [*recorded_run, *envelopes([stuck])]}))

    code, out, err = run(["replay", "--file", str(path), "--module", f"{SAMPLES}.recorded"])

    assert code == 0, err
    assert out.strip() == "ok  order-9  samples.pay  3 events, running"
    assert "stopped by a non-determinism at #2; this code replays its history cleanly" in err


def test_json_lines_and_api_history_entries_are_read_too(tmp_path: Path) -> None:
    events = envelopes(record(recorded.Pay, "samples.pay", "order-1", {"id": 1}))
    lines = tmp_path / "dump.jsonl"
    lines.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    api = tmp_path / "api.json"
    api.write_text(
        json.dumps(
            {
                "items": [
                    {
                        "sequence": e["data"]["sequence"],
                        "origin": "history",
                        "type": e["type"],
                        "data": e["data"],
                    }
                    for e in events
                ]
            }
        )
    )

    for path in (lines, api):
        code, out, err = run(["replay", "--file", str(path), "--module", f"{SAMPLES}.recorded"])
        assert (code, out.split()[:2]) == (0, ["ok", "order-1"]), err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["replay"], "name exactly one history source"),
        (["replay", "w1", "--topic"], "got WORKFLOW_ID and --topic"),
        (["replay", "--file", "x.json"], "name its modules with --module"),
        (["replay", "--file", "missing.json", "--module", "m"], "cannot read history file missing.json"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str) -> None:
    code, _, err = run(argv)

    assert code == 2
    assert message in err


def test_unknown_types_and_modules_fail_with_what_to_do(tmp_path: Path) -> None:
    path = str(histories(tmp_path))

    code, _, err = run(["replay", "--file", path, "--module", f"{SAMPLES}.renamed"])
    assert code == 1
    assert "refund-1 is a samples.refund, which no class in" in err

    code, _, err = run(["replay", "--file", path, "--module", f"{SAMPLES}.no_such_module"])
    assert code == 1
    assert "cannot import workflow module" in err


def test_one_workflow_from_the_api_is_replayed_against_the_code() -> None:
    events = envelopes(record(recorded.Pay, "samples.pay", "order-7", {"id": 7}))
    items = [
        {"sequence": e["data"]["sequence"], "origin": "history", "type": e["type"], "data": e["data"]}
        for e in events
    ]

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/workflows/order-7/history"
        return httpx.Response(200, json={"items": items, "next_cursor": None})

    ok = run(["replay", "order-7", "--module", f"{SAMPLES}.recorded"], httpx.MockTransport(answer))
    changed = run(["replay", "order-7", "--module", f"{SAMPLES}.renamed"], httpx.MockTransport(answer))

    assert ok[:2] == (0, "ok  order-7  samples.pay  8 events, completed\n")
    assert changed[0] == 1
    assert "MISMATCH  order-7  samples.pay" in changed[1]


def test_payload_references_without_a_payload_database_are_refused(tmp_path: Path) -> None:
    events = envelopes(record(recorded.Pay, "samples.pay", "order-1", {"id": 1}))
    completed = next(e for e in events if e["type"] == "workflow.activity_completed")
    completed["data"]["result"] = {"$slotflow_payload": "sha256:" + "a" * 64, "bytes": 70_000}
    path = tmp_path / "refs.json"
    path.write_text(json.dumps(events))

    code, _, err = run(["replay", "--file", str(path), "--module", f"{SAMPLES}.recorded"])

    assert code == 2
    assert "workflow order-1 has payloads stored by reference; name the database" in err
