"""slotflow's cron against croniter 7, cronsim 2.9 and the documented rules, on generated input.

Three readings are held to slotflow's next-fire sequences:

- the documented rules (tests/cron_oracle.py, sharing no code with slotflow): always, every slot;
- croniter and cronsim, the reference implementations: on every expression they accept, except
  where an expression hits a difference docs/scheduling.md lists ("Where slotflow reads cron
  differently"); `cron_references` names those from the references' own parsers.

In UTC the sequences are compared whole. In zones with DST (Europe/Berlin, America/New_York,
Australia/Lord_Howe, around their 2026 changes), the documented DST policy oracle checks every
slot and every skipped wall time under all six policies; cronsim is compared whole under the policy
that does what it does (`cronsim_dst_policy`), except where clocks change by half an hour (it steps
real minutes and hours, and misses wall times next to such a change); croniter has no policy of its
own, so only wall times that happen exactly once are compared with it.

The croniter and cronsim test suites' own cases run at the end (tests/unit/core/ported_cron_cases.py
holds them with their sources and licences: croniter is MIT, cronsim BSD 3-Clause).
"""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from slotflow.contracts.policies import DstPolicy
from slotflow.contracts.schedules import CronSpec
from slotflow.core._cronfields import parse_expression
from slotflow.core.cronslots import dst_skips_between, preview, slots_between
from slotflow.errors import InvalidCronExpression
from tests.cron_oracle import CronOracle, expected_slots, instants_showing, offsets_near, reading
from tests.unit.core.cron_fields import cron_expressions
from tests.unit.core.cron_references import (
    croniter_accepts,
    croniter_differences,
    croniter_until,
    croniter_walls,
    cronsim_accepts,
    cronsim_differences,
    cronsim_dst_policy,
    cronsim_until,
    cronsim_walls,
)
from tests.unit.core.ported_cron_cases import CRONITER_CASES, CRONSIM_CASES

DST_ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]
#: Zones whose clocks change by half an hour.
HALF_HOUR_CHANGES = {"Australia/Lord_Howe"}
POLICIES = [
    DstPolicy(repeated=r, nonexistent=n) for r in ("first", "last", "both") for n in ("shift", "skip")
]
SEQUENCE = 12
#: Hypothesis bounds its datetimes naively; the draws are whole seconds of wall time or UTC.
whole_seconds = st.datetimes(
    min_value=datetime(2000, 1, 1),  # noqa: DTZ001
    max_value=datetime(2060, 1, 1),  # noqa: DTZ001
).map(lambda d: d.replace(microsecond=0))


def _accepted(expression: str) -> bool:
    try:
        parse_expression(expression)
    except InvalidCronExpression:
        return False
    return True


def _utc(expression: str, after: datetime, count: int) -> list[datetime]:
    spec = CronSpec(expression=expression)
    slots = preview(spec, DstPolicy(), after=after.replace(tzinfo=UTC), count=count, schedule_id="diff")
    return [s.at.replace(tzinfo=None) for s in slots]


# --- the grammar ----------------------------------------------------------------------------------


@settings(max_examples=600, deadline=None)
@given(expression=cron_expressions(hashed=True))
def test_everything_croniter_accepts_slotflow_accepts(expression: str) -> None:
    # A schedule stored under croniter's parser must still parse (R included, read as H).
    if croniter_accepts(expression):
        assert _accepted(expression), expression
    # cronsim's one extra: a step on L or LW, which it ignores; slotflow refuses it (none here).
    if cronsim_accepts(expression):
        assert _accepted(expression), expression


# --- UTC: whole sequences ---------------------------------------------------------------------------


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(expression=cron_expressions(), after=whole_seconds)
def test_utc_sequences_agree_with_the_oracle_croniter_and_cronsim(expression: str, after: datetime) -> None:
    assume(_accepted(expression))
    ours = _utc(expression, after, SEQUENCE)
    assert ours == CronOracle(expression).next_wall_times(after, SEQUENCE), expression

    if croniter_accepts(expression):
        differences = croniter_differences(expression)
        event("croniter: compared" if not differences else f"croniter: left out ({differences[0]})")
        if not differences:
            assert ours == croniter_walls(expression, after, SEQUENCE), expression
    else:
        event("croniter: refuses the expression")

    if cronsim_accepts(expression):
        differences = cronsim_differences(expression)
        event("cronsim: compared" if not differences else f"cronsim: left out ({differences[0]})")
        if not differences:
            assert ours == cronsim_walls(expression, after, SEQUENCE), expression
    else:
        event("cronsim: refuses the expression")


# --- zones with DST -------------------------------------------------------------------------------


def _transitions(zone: ZoneInfo, year: int = 2026) -> list[datetime]:
    found = []
    instant = datetime(year, 1, 1, tzinfo=UTC)
    while instant.year == year:
        later = instant + timedelta(hours=1)
        if later.astimezone(zone).utcoffset() != instant.astimezone(zone).utcoffset():
            found.append(later)
        instant = later
    return found


#: Expressions whose seconds (six fields) are one value: around a change the oracle reads the clock
#: for each slot, and a repeated hour of per-second slots is 3,600 of them under every policy.
near_a_change_expressions = cron_expressions().map(
    lambda e: " ".join(["30", *e.split()[1:]]) if len(e.split()) == 6 else e
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    expression=near_a_change_expressions,
    zone_name=st.sampled_from(DST_ZONES),
    which=st.integers(0, 1),
    lead=st.integers(0, 4 * 3600),
)
def test_dst_zones_agree_with_the_policy_oracle_and_the_references(
    expression: str, zone_name: str, which: int, lead: int
) -> None:
    assume(_accepted(expression))
    zone = ZoneInfo(zone_name)
    after = _transitions(zone)[which] - timedelta(seconds=lead)
    default = slots_between(
        CronSpec(expression=expression, timezone=zone_name),
        DstPolicy(),
        after=after,
        until=after + timedelta(hours=8),
        limit=60,
        schedule_id="diff",
    )
    assume(default)
    until = default[-1].at
    spec = CronSpec(expression=expression, timezone=zone_name)

    # Every policy, every slot and every skipped wall time, against the documented DST policy.
    for policy in POLICIES:
        slots = slots_between(spec, policy, after=after, until=until, limit=100_000, schedule_id="diff")
        want, skipped = expected_slots(
            expression,
            zone_name,
            after=after,
            until=until,
            repeated=policy.repeated,
            nonexistent=policy.nonexistent,
        )
        assert [(s.at, s.local, s.dst) for s in slots] == list(want), (expression, zone_name, after, policy)
        skips = dst_skips_between(spec, policy, after=after, until=until, schedule_id="diff")
        assert [(s.at, s.detail.split()[2]) for s in skips] == [(s.at, s.wall.isoformat()) for s in skipped]

    start = after.astimezone(zone)
    offsets = offsets_near(reading(after, zone), zone) | offsets_near(reading(until, zone), zone)
    oracle = CronOracle(expression)

    def happens_once(at: datetime) -> bool:
        wall = reading(at, zone)
        return oracle.matches(wall) and len(instants_showing(wall, zone, offsets)) == 1

    # cronsim steps whole minutes and hours of real time, which miss wall times next to a change of
    # half an hour (a repeated half hour's second pass, 02:00-02:29 after clocks go back): there it
    # is not compared.
    if (
        cronsim_accepts(expression)
        and not cronsim_differences(expression)
        and zone_name not in HALF_HOUR_CHANGES
    ):
        event("cronsim in a DST zone: compared")
        ours = slots_between(
            spec, cronsim_dst_policy(expression), after=after, until=until, limit=100_000, schedule_id="diff"
        )
        assert [s.at for s in ours] == cronsim_until(expression, start, until), (expression, zone_name, after)

    if croniter_accepts(expression) and not croniter_differences(expression):
        # croniter has no DST policy of its own: the wall times that happen once are compared.
        event("croniter in a DST zone: compared on wall times that happen once")
        ours_once = {s.at for s in default if s.dst is None and happens_once(s.at)}
        theirs_once = {t for t in croniter_until(expression, start, until) if happens_once(t)}
        assert ours_once == theirs_once, (expression, zone_name, after)


# --- the references' own test cases -------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expression", "start", "expected", "ended"), CRONITER_CASES, ids=[c[0] for c in CRONITER_CASES]
)
def test_croniters_own_cases(
    source: str, expression: str, start: str, expected: tuple[str, ...], ended: bool
) -> None:
    after = datetime.fromisoformat(start)
    ours = [w.isoformat() for w in _utc(expression, after, len(expected) + (1 if ended else 0))]
    differences = croniter_differences(expression)
    if not differences:
        assert ours == list(expected), source
    else:
        # A documented difference: the documented reading holds, and croniter's is another one.
        walls = CronOracle(expression, "diff").next_wall_times(after, len(expected) + 1)
        assert ours == [w.isoformat() for w in walls][: len(ours)], source
        assert ours != list(expected) or ended != (len(ours) == len(expected)), source


@pytest.mark.parametrize(
    ("source", "expression", "start", "expected", "ended"), CRONSIM_CASES, ids=[c[0] for c in CRONSIM_CASES]
)
def test_cronsims_own_cases(
    source: str, expression: str, start: str, expected: tuple[str, ...], ended: bool
) -> None:
    after = datetime.fromisoformat(start)
    zone = "Europe/Riga" if after.utcoffset() not in (None, timedelta(0)) else "UTC"
    aware = after if after.tzinfo is not None else after.replace(tzinfo=UTC)
    spec = CronSpec(expression=expression, timezone=zone)
    # In Riga cronsim follows Debian cron around DST changes; the same policy reproduces it.
    slots = preview(spec, cronsim_dst_policy(expression), after=aware, count=len(expected) + int(ended))
    if after.tzinfo is None:
        ours = [s.at.replace(tzinfo=None).isoformat() for s in slots]
    else:
        ours = [s.at.astimezone(ZoneInfo(zone) if zone != "UTC" else UTC).isoformat() for s in slots]
    assert not cronsim_differences(expression)
    assert ours == list(expected), source
