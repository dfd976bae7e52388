"""The preview (library call and `slotflow-ticker preview`): next firings with DST days marked."""

from datetime import UTC, datetime

import pytest

from slotflow.contracts import CronSpec, DstPolicy
from slotflow_ticker.__main__ import main
from slotflow_ticker.preview import preview_lines

BERLIN_0230 = CronSpec(expression="30 2 * * *", timezone="Europe/Berlin")
AFTER = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)


def test_a_shifted_slot_is_marked_on_its_dst_day() -> None:
    lines = preview_lines(BERLIN_0230, DstPolicy(), after=AFTER, count=4)
    assert [line.fires for line in lines] == [True] * 4
    marked = [line for line in lines if line.note]
    assert len(marked) == 1
    assert marked[0].at == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert "shifted" in marked[0].note


def test_a_skipped_local_time_is_listed_as_not_firing() -> None:
    lines = preview_lines(BERLIN_0230, DstPolicy(nonexistent="skip"), after=AFTER, count=3)
    assert [line.fires for line in lines] == [True, False, True, True]
    assert "does not exist" in lines[1].note


def test_both_passes_of_a_repeated_hour_are_marked() -> None:
    spec = CronSpec(expression="30 1 * * *", timezone="America/New_York")
    lines = preview_lines(
        spec, DstPolicy(repeated="both"), after=datetime(2026, 10, 31, 12, 0, tzinfo=UTC), count=3
    )
    assert [line.note.split(":")[0] for line in lines[:2]] == ["DST", "DST"]
    assert "first pass" in lines[0].note
    assert "second pass" in lines[1].note
    assert lines[2].note == ""


def test_the_preview_command_prints_the_next_firings(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "preview",
                "--cron",
                "30 2 * * *",
                "--timezone",
                "Europe/Berlin",
                "--after",
                "2026-03-27T12:00:00+00:00",
                "--count",
                "3",
            ]
        )
    assert exited.value.code == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3
    assert out[1].startswith("2026-03-29T01:00:00Z")
    assert "shifted" in out[1]


def test_the_preview_command_explains_a_bad_expression(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["preview", "--cron", "61 * * * *"])
    assert exited.value.code == 2
    assert "invalid" in capsys.readouterr().err


def test_the_preview_of_an_h_cron_draws_from_the_schedule_id_it_is_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    after = ["--after", "2026-01-01T00:00:00+00:00", "--count", "1"]
    with pytest.raises(SystemExit) as exited:
        main(["preview", "--cron", "H 2 * * *", *after])
    assert exited.value.code == 2
    assert "--as-schedule" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["preview", "--cron", "H 2 * * *", "--as-schedule", "payouts", *after])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("2026-01-01T02:04:00Z")  # docs/scheduling.md's example
