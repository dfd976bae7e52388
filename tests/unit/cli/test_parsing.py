"""Flag values to contract values: durations, instants, JSON objects, specs and definitions."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slotflow.cli.errors import UsageError
from slotflow.cli.parsing import (
    build_definition,
    build_spec,
    format_duration,
    parse_duration,
    parse_instant,
    parse_json_object,
)
from slotflow.contracts import CronSpec, IntervalSpec, OnceSpec

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("90", timedelta(seconds=90)),
        ("1.5", timedelta(seconds=1.5)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1w", timedelta(weeks=1)),
        ("250ms", timedelta(milliseconds=250)),
        ("1m30s", timedelta(seconds=90)),
        ("PT1H30M", timedelta(hours=1, minutes=30)),
        ("pt5s", timedelta(seconds=5)),
    ],
)
def test_durations_in_every_accepted_spelling(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "soon", "5 minutes", "1x", "h1", "-5s", "P"])
def test_a_bad_duration_names_the_flag_and_shows_examples(text: str) -> None:
    with pytest.raises(UsageError, match=r"--every .*(e\.g\. 30s|empty)"):
        parse_duration(text, flag="--every")


@given(st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3650)))
def test_formatted_durations_parse_back_to_the_same_value(value: timedelta) -> None:
    assert parse_duration(format_duration(value)) == value


def test_format_duration_is_compact() -> None:
    assert format_duration(timedelta(hours=1, minutes=30)) == "1h30m"
    assert format_duration(timedelta(0)) == "0s"
    assert format_duration(timedelta(milliseconds=250)) == "250ms"
    assert format_duration(-timedelta(seconds=5)) == "-5s"


def test_instants_need_an_offset() -> None:
    assert parse_instant("2026-03-01T02:00:00Z") == datetime(2026, 3, 1, 2, tzinfo=UTC)
    assert parse_instant("2026-03-01T03:00+01:00") == datetime(2026, 3, 1, 2, tzinfo=UTC)
    with pytest.raises(
        UsageError, match=r"--at '2026-03-01T02:00' has no UTC offset; add one, e\.g\. 2026-03-01T02:00Z"
    ):
        parse_instant("2026-03-01T02:00", flag="--at")
    with pytest.raises(UsageError, match="is not a time"):
        parse_instant("tomorrow", flag="--at")


def test_relative_instants_count_from_now() -> None:
    assert parse_instant("now", now=NOW) == NOW
    assert parse_instant("now-1d", now=NOW) == NOW - timedelta(days=1)
    assert parse_instant("NOW+2h30m", now=NOW) == NOW + timedelta(hours=2, minutes=30)
    with pytest.raises(UsageError, match="not a duration"):
        parse_instant("now-lots", now=NOW)
    # Whole seconds from "now" (a one-shot's run id reads ...T12:02:00Z); a written fraction stays.
    assert parse_instant("now+2m", now=NOW.replace(microsecond=483_920)) == NOW + timedelta(minutes=2)
    assert parse_instant("2026-03-01T12:00:00.5Z").microsecond == 500_000


def test_json_objects_inline_or_from_a_file(tmp_path: Path) -> None:
    assert parse_json_object('{"currency": "EUR"}', flag="--payload") == {"currency": "EUR"}
    document = tmp_path / "payload.json"
    document.write_text(json.dumps({"n": 1}), encoding="utf-8")
    assert parse_json_object(f"@{document}", flag="--payload") == {"n": 1}
    with pytest.raises(UsageError, match=r"--payload is not valid JSON: .* at line 1 column 2"):
        parse_json_object("{a}", flag="--payload")
    with pytest.raises(UsageError, match="must be a JSON object"):
        parse_json_object("[1, 2]", flag="--payload")
    with pytest.raises(UsageError, match="cannot read"):
        parse_json_object(f"@{tmp_path / 'missing.json'}", flag="--payload")


def test_exactly_one_spec_flag() -> None:
    with pytest.raises(UsageError, match=r"exactly one of --cron, --every or --at$"):
        build_spec(cron=None, every=None, at=None, tz=None, anchor=None)
    with pytest.raises(UsageError, match=r"\(got --cron, --every\)"):
        build_spec(cron="* * * * *", every="5m", at=None, tz=None, anchor=None)
    with pytest.raises(UsageError, match="--tz applies to --cron only"):
        build_spec(cron=None, every="5m", at=None, tz="UTC", anchor=None)
    with pytest.raises(UsageError, match="--anchor applies to --every only"):
        build_spec(cron="* * * * *", every=None, at=None, tz=None, anchor="now")


def test_specs_of_each_kind() -> None:
    cron = build_spec(cron="0  2 * * *", every=None, at=None, tz="Europe/Berlin", anchor=None)
    assert cron == CronSpec(expression="0 2 * * *", timezone="Europe/Berlin")
    every = build_spec(cron=None, every="15m", at=None, tz=None, anchor="2026-01-01T00:05:00Z")
    assert every == IntervalSpec(every=timedelta(minutes=15), anchor=datetime(2026, 1, 1, 0, 5, tzinfo=UTC))
    once = build_spec(cron=None, every=None, at="2026-03-01T02:00:00Z", tz=None, anchor=None)
    assert once == OnceSpec(at=datetime(2026, 3, 1, 2, tzinfo=UTC))


def test_invalid_cron_and_zone_say_what_is_wrong() -> None:
    with pytest.raises(UsageError, match=r"--cron '61 \* \* \* \*': invalid cron expression .* use 5 fields"):
        build_spec(cron="61 * * * *", every=None, at=None, tz=None, anchor=None)
    with pytest.raises(UsageError, match=r"--cron .*needs 5 or 6 fields, got 2"):
        build_spec(cron="* *", every=None, at=None, tz=None, anchor=None)
    with pytest.raises(UsageError, match="--tz 'Mars/Olympus' is not a known IANA time zone"):
        build_spec(cron="* * * * *", every=None, at=None, tz="Mars/Olympus", anchor=None)
    with pytest.raises(UsageError, match="invalid --every: every: "):
        build_spec(cron=None, every="500ms", at=None, tz=None, anchor=None)


def test_definition_keeps_defaults_for_unset_policy_flags() -> None:
    spec = CronSpec(expression="0 2 * * *")
    definition = build_definition(spec=spec, handler="payouts.pay")
    assert definition.misfire.policy == "fire_once"
    assert definition.retry.max_attempts == 5
    assert definition.retry.backoff_coefficient == 2.0
    unlimited = build_definition(spec=spec, handler="payouts.pay", max_attempts=0, backoff_coefficient=1)
    assert (unlimited.retry.unlimited, unlimited.retry.backoff_coefficient) == (True, 1.0)
    assert definition.payload == {}
    assert definition.tags == ()


def test_definition_from_every_policy_flag() -> None:
    definition = build_definition(
        spec=CronSpec(expression="0 2 * * *"),
        handler="payouts.pay",
        payload='{"currency": "EUR"}',
        misfire="fire_all",
        max_catch_up=10,
        catch_up_window="6h",
        grace="30s",
        overlap="buffer_one",
        retry_base="2s",
        retry_cap="1m",
        max_attempts=3,
        backoff_coefficient=1.5,
        non_retryable=["CardDeclined"],
        start_to_close="90s",
        heartbeat_timeout="20s",
        dst_repeated="both",
        dst_nonexistent="skip",
        jitter="10s",
        start_at="2026-01-01T00:00:00Z",
        end_at="2027-01-01T00:00:00Z",
        tags=["money-moving", "eu"],
    )
    assert definition.payload == {"currency": "EUR"}
    assert (definition.misfire.policy, definition.misfire.max_catch_up) == ("fire_all", 10)
    assert definition.misfire.catch_up_window == timedelta(hours=6)
    assert definition.misfire.grace == timedelta(seconds=30)
    assert definition.overlap == "buffer_one"
    assert definition.retry.base == timedelta(seconds=2)
    assert definition.retry.cap == timedelta(minutes=1)
    assert definition.retry.max_attempts == 3
    assert definition.retry.backoff_coefficient == 1.5
    assert definition.retry.non_retryable == ("CardDeclined",)
    assert definition.retry.start_to_close == timedelta(seconds=90)
    assert definition.retry.heartbeat_timeout == timedelta(seconds=20)
    assert (definition.dst.repeated, definition.dst.nonexistent) == ("both", "skip")
    assert definition.jitter == timedelta(seconds=10)
    assert definition.tags == ("money-moving", "eu")


def test_definition_errors_name_the_policy() -> None:
    spec = CronSpec(expression="0 2 * * *")
    with pytest.raises(UsageError, match=r"invalid retry policy .*cap cannot be less than base"):
        build_definition(spec=spec, handler="h", retry_base="10m", retry_cap="1m")
    with pytest.raises(UsageError, match="invalid misfire policy: max_catch_up"):
        build_definition(spec=spec, handler="h", max_catch_up=0)
    with pytest.raises(UsageError, match="invalid schedule: end_at must be after start_at"):
        build_definition(spec=spec, handler="h", start_at="2026-02-01T00:00Z", end_at="2026-01-01T00:00Z")
    with pytest.raises(UsageError, match="invalid schedule: jitter"):
        build_definition(spec=spec, handler="h", jitter="2h")
