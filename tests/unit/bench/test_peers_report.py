"""The peer harness's pure parts: sizes, interleaving, adapters' JSON lines, medians, ratios, the page."""

import json
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.unit

MACHINE = {
    "cpu": "test CPU",
    "cores": 2,
    "python": "3.11",
    "kernel": "k",
    "postgres": "15",
    "when": "2026-12-05T12:00:00+00:00",
    "load_average_at_start": [1.0, 2.0, 3.0],
}


def line(**fields: Any) -> str:
    return json.dumps(fields)


def test_sizes_default_to_the_issue_s(report: ModuleType) -> None:
    assert report.parse_sizes("", ["jobs", "replay", "recovery"]) == {
        "jobs": 20_000,
        "replay": 10_000,
        "recovery": 10_000,
    }


def test_one_size_applies_to_every_workload_but_replay(report: ModuleType) -> None:
    sizes = report.parse_sizes("300", ["jobs", "schedules", "replay"])
    assert sizes == {"jobs": 300, "schedules": 300, "replay": 10_000}


def test_sizes_per_workload(report: ModuleType) -> None:
    sizes = report.parse_sizes("jobs=500, replay=2000", ["jobs", "replay", "workflows"])
    assert sizes == {"jobs": 500, "replay": 2000, "workflows": 2000}


@pytest.mark.parametrize("text", ["0", "-5", "jobs=0", "recovery=10", "jobs=x"])
def test_bad_sizes_are_refused(report: ModuleType, text: str) -> None:
    with pytest.raises(ValueError, match=r".+"):
        report.parse_sizes(text, ["jobs", "replay"])


def test_lists_drop_blanks_and_repeats_and_refuse_unknown_names(report: ModuleType) -> None:
    assert report.split_list("slotflow, bare,,slotflow") == ["slotflow", "bare"]
    with pytest.raises(ValueError, match="unknown"):
        report.split_list("jobs,cooking", ["jobs", "replay"])
    with pytest.raises(ValueError, match="empty"):
        report.split_list(" , ")


def test_each_system_leads_one_run_in_turn(report: ModuleType) -> None:
    systems = ["slotflow", "bare", "dbos"]
    orders = [report.rotation(systems, run) for run in range(3)]
    assert orders == [
        ["slotflow", "bare", "dbos"],
        ["bare", "dbos", "slotflow"],
        ["dbos", "slotflow", "bare"],
    ]
    assert report.rotation(systems, 3) == orders[0]
    assert sorted(order[0] for order in orders) == sorted(systems)
    assert report.rotation([], 4) == []


def test_the_last_stdout_line_is_the_result(report: ModuleType) -> None:
    stdout = "progress 1\nprogress 2\n" + line(
        system="bare", workload="jobs", size=10, metrics={"per_second": 5, "p50_ms": 1.5}, notes="n"
    )
    parsed = report.parse_adapter_output(stdout + "\n\n", "bare", "jobs")
    assert parsed == {"metrics": {"per_second": 5.0, "p50_ms": 1.5}, "notes": "n", "size": 10}


def test_not_measured_carries_its_reason(report: ModuleType) -> None:
    stdout = line(system="dbos", workload="replay", not_measured="no replayer")
    assert report.parse_adapter_output(stdout, "dbos", "replay") == {"not_measured": "no replayer"}


@pytest.mark.parametrize(
    "stdout",
    [
        "",
        "not json",
        "[1, 2]",
        line(system="bare", workload="replay", metrics={"per_second": 1}),
        line(system="bare", workload="jobs"),
        line(system="bare", workload="jobs", metrics={}),
        line(system="bare", workload="jobs", metrics={"per_second": "fast"}),
        line(system="bare", workload="jobs", metrics={"per_second": True}),
        line(system="bare", workload="jobs", not_measured=""),
        '{"system": "bare", "workload": "jobs", "metrics": {"per_second": NaN}}',
    ],
)
def test_anything_else_is_an_adapter_error(report: ModuleType, stdout: str) -> None:
    with pytest.raises(report.AdapterOutputError):
        report.parse_adapter_output(stdout, "bare", "jobs")


def record(run: int, system: str, workload: str = "jobs", **outcome: Any) -> dict[str, Any]:
    return {"run": run, "system": system, "workload": workload, "size": 100, **outcome}


def test_medians_min_max_and_ratios(report: ModuleType) -> None:
    records = [
        record(1, "slotflow", metrics={"per_second": 100.0}),
        record(2, "slotflow", metrics={"per_second": 300.0}),
        record(3, "slotflow", metrics={"per_second": 200.0}),
        record(1, "bare", metrics={"per_second": 400.0}),
        record(2, "bare", metrics={"per_second": 500.0}),
        record(3, "bare", error="exit 1"),
    ]
    summaries = report.aggregate(records)["jobs"]
    assert summaries["slotflow"]["per_second"] == report.Summary(200.0, 100.0, 300.0, 3)
    assert summaries["bare"]["per_second"] == report.Summary(450.0, 400.0, 500.0, 2)
    assert report.ratio(
        summaries["slotflow"]["per_second"], summaries["bare"]["per_second"]
    ) == pytest.approx(200 / 450)
    assert report.ratio(summaries["slotflow"]["per_second"], None) is None
    assert report.ratio(None, summaries["bare"]["per_second"]) is None
    assert report.ratio(summaries["slotflow"]["per_second"], report.Summary(0.0, 0.0, 0.0, 1)) is None


def test_a_ratio_far_below_one_keeps_two_significant_digits(report: ModuleType) -> None:
    assert report.ratio_text(1489 / 476490) == "0.0031"
    assert report.ratio_text(0.05) == "0.05"
    assert report.ratio_text(0.45) == "0.45"
    assert report.ratio_text(237.1) == "237.10"
    assert report.ratio_text(0.0) == "0.00"


def test_which_way_is_better(report: ModuleType) -> None:
    assert report.lower_is_better("p99_ms")
    assert report.lower_is_better("lateness_p50_ms")
    assert report.lower_is_better("seconds_to_progress")
    assert report.lower_is_better("every_shard_progress_seconds")
    assert report.lower_is_better("first_progress_s")
    assert not report.lower_is_better("per_second")
    assert not report.lower_is_better("events_per_second")


def test_figures_keep_about_three_digits(report: ModuleType) -> None:
    assert report.figure(217372.4) == "217,372"
    assert report.figure(24.44) == "24.4"
    assert report.figure(1.234) == "1.23"
    cell = report.cell(report.Summary(1040.0, 902.0, 1177.0, 2), 3)
    assert cell == "**1,040** (902–1,177) [2 of 3 runs]"
    assert report.cell(None, 3) == "—"


def page(report: ModuleType, sizes: dict[str, int], records: list[dict[str, Any]]) -> str:
    text: str = report.render(
        command="make bench SIZE=100 RUNS=2",
        sizes=sizes,
        systems=["slotflow", "bare", "temporal"],
        runs=2,
        machine=MACHINE,
        installs={
            "slotflow": {"python": "python", "version": "0.1.0"},
            "bare": {"python": "python", "version": "sql"},
            "temporal": {"unavailable": "adapter not written yet"},
        },
        records=records,
        load_at_end=[1.5, 1.0, 0.5],
    )
    return text


def test_the_page_shows_medians_ratios_reasons_and_the_command(report: ModuleType) -> None:
    records = [
        record(1, "slotflow", metrics={"per_second": 100.0, "p50_ms": 20.0}, notes="two claimers"),
        record(1, "bare", metrics={"per_second": 400.0, "p50_ms": 5.0}, load_average=[2.0, 1.0, 1.0]),
        record(1, "temporal", not_measured="adapter not written yet"),
        record(2, "bare", metrics={"per_second": 400.0, "p50_ms": 5.0}),
        record(2, "slotflow", error="exit 1: boom"),
        record(2, "temporal", not_measured="adapter not written yet"),
    ]
    text = page(report, {"jobs": 100}, records)
    assert "> **Development-size run.** Sizes below the issue's: jobs 100 (issue: 20,000)." in text
    assert "make bench SIZE=100 RUNS=2" in text
    assert "| metric | slotflow | bare | temporal | slotflow / bare | slotflow / temporal |" in text
    per_second = next(row for row in text.splitlines() if "`per_second`" in row)
    assert per_second.split(" | ")[1:] == [
        "**100** (100–100) [1 of 2 runs]",
        "**400** (400–400)",
        "—",
        "0.25",
        "— |",
    ]
    p50 = next(row for row in text.splitlines() if "`p50_ms`" in row)
    assert "(lower is better)" in p50
    assert "4.00" in p50
    assert "- slotflow: two claimers" in text
    assert "- slotflow: run 2 failed: exit 1: boom" in text
    assert "- temporal: not measured: adapter not written yet" in text
    assert "| temporal | — | not available: adapter not written yet |" in text
    assert "CPU: test CPU, 2 cores" in text
    assert "1-minute load after each adapter run 2.0 to 2.0" in text
    every_run = text.split("## Every run")[1]
    assert "temporal" not in every_run  # not measured: listed with its reason, not as a run
    assert "| 2 | jobs | slotflow | failed | — |" in every_run


def test_no_development_banner_at_the_issue_s_sizes(report: ModuleType) -> None:
    records = [record(1, "slotflow", workload="replay", metrics={"events_per_second": 1e5})]
    text = page(report, {"replay": 10_000}, records)
    assert "Development-size" not in text
    assert "## replay (size 10,000)" in text


def test_a_page_written_before_the_last_run_says_it_is_partial(report: ModuleType) -> None:
    records = [record(1, "slotflow", workload="replay", metrics={"events_per_second": 1e5})]
    kwargs: dict[str, Any] = {
        "command": "make bench",
        "sizes": {"replay": 10_000},
        "systems": ["slotflow"],
        "runs": 1,
        "machine": MACHINE,
        "installs": {"slotflow": {"python": "python", "version": "0.1.0"}},
        "records": records,
        "load_at_end": [1.0, 1.0, 1.0],
    }
    partial = report.render(**kwargs, runs_asked=3)
    assert partial.startswith("# slotflow beside its peers\n\n> **Partial: 1 of 3 runs.**")
    assert "Medians of 1 run(s)" in partial
    assert "Partial" not in report.render(**kwargs, runs_asked=1)
    assert "Partial" not in report.render(**kwargs)


def test_a_descriptive_figure_has_no_direction_and_no_ratio(report: ModuleType) -> None:
    records = [
        record(1, "slotflow", workload="replay", metrics={"events_per_second": 2e5, "events": 10_000.0}),
        record(1, "temporal", workload="replay", metrics={"events_per_second": 4e3, "events": 9_998.0}),
    ]
    text = page(report, {"replay": 10_000}, records)
    events = next(row for row in text.splitlines() if "`events`" in row)
    assert "better" not in events
    assert events.endswith("| — |")
    rate = next(row for row in text.splitlines() if "`events_per_second`" in row)
    assert rate.endswith("| 50.00 |")
