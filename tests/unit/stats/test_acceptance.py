"""The stats worker refuses what every other service refuses, and counts what they accept.

It cannot import slotflow (decision 0005): the records and the message models' verdicts come
from tests/integration/acceptance/stats_records.json (the hostile values of
`slotflow.testing.badinput.hostile_values`, each placed in a record the worker reads; a contract
test keeps the file current), read here with nothing but the standard library and the worker.

Before the rule: the worker counted a job id of 1,000 CJK characters (its window's key, past
PostgreSQL's index limit, failed every copy of the windows), a JobDue whose handler or payload held
a NUL, a run whose result held `NaN` or nested 100 deep, and an instant in year 0 in UTC, all of
which every other service refuses.
"""

import json
from pathlib import Path
from typing import Any, cast

import pytest

from slotflow_stats.errors import UndecodableEvent
from slotflow_stats.observe import Family, observe

RECORDS = Path(__file__).parents[2] / "integration" / "acceptance" / "stats_records.json"


def _records() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = json.loads(RECORDS.read_text())
    return loaded


@pytest.mark.parametrize("record", _records(), ids=lambda r: str(r["case"]))
def test_the_worker_decides_as_the_models_do(record: dict[str, Any]) -> None:
    family = cast(Family, record["family"])
    value = str(record["value"]).encode("utf-8", errors="surrogatepass")
    if record["refused"] is not None:
        with pytest.raises(UndecodableEvent):
            observe(family, value, None)
    else:
        observation = observe(family, value, None)
        assert observation is not None, record["case"]
        observation.subject.encode("utf-8")  # storable as it is


def test_the_file_holds_both_verdicts() -> None:
    records = _records()
    assert any(r["refused"] is None for r in records)
    assert any(r["refused"] is not None for r in records)
