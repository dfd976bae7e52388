"""The hostile records the stats worker's tests read (tests/integration/acceptance/stats_records.json)
carry the models' current verdicts: the worker cannot import slotflow (decision 0005), so that
file is how the acceptance rule reaches its tests. Out of date, this fails; write it again with
`python -m tests.integration.acceptance.stats_records`."""

from tests.integration.acceptance.stats_records import RECORDS_FILE, render


def test_the_committed_records_match_the_models() -> None:
    assert RECORDS_FILE.read_text() == render(), (
        f"{RECORDS_FILE.name} is out of date: run `python -m tests.integration.acceptance.stats_records`"
    )
