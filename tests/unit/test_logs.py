"""slotflow.logs: the extras of a log call reach both formats; a bad setting is refused."""

import io
import json
import logging
import sys

import pytest

from slotflow.logs import BadLogSetting, configure_logging


def _logged(monkeypatch: pytest.MonkeyPatch, fmt: str) -> str:
    monkeypatch.setenv("SLOTFLOW_LOG_FORMAT", fmt)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # configure_logging installs its own
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("aiokafka").level)
    try:
        configure_logging(stream=out, force=True)
        logging.getLogger("slotflow_claimer.executor").warning(
            "run %s failed", "r@1", extra={"run_id": "r@1", "attempt": 2}
        )
        logging.getLogger("aiokafka.conn").info("connecting to a broker")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("aiokafka").setLevel(saved[2])
    return out.getvalue()


def test_json_lines_carry_the_extras_and_aiokafka_info_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _logged(monkeypatch, "json").splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert (entry["level"], entry["logger"], entry["message"]) == (
        "WARNING",
        "slotflow_claimer.executor",
        "run r@1 failed",
    )
    assert (entry["run_id"], entry["attempt"]) == ("r@1", 2)


def test_text_lines_append_the_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    (line,) = _logged(monkeypatch, "text").splitlines()
    assert line.endswith("WARNING slotflow_claimer.executor: run r@1 failed [run_id=r@1 attempt=2]")


def test_an_unknown_format_or_level_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOTFLOW_LOG_FORMAT", "yaml")
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    with pytest.raises(BadLogSetting, match="SLOTFLOW_LOG_FORMAT='yaml': expected one of text, json"):
        configure_logging(stream=io.StringIO(), force=True)
    monkeypatch.setenv("SLOTFLOW_LOG_FORMAT", "json")
    monkeypatch.setenv("SLOTFLOW_LOG_LEVEL", "LOUD")
    with pytest.raises(BadLogSetting, match="SLOTFLOW_LOG_LEVEL"):
        configure_logging(stream=io.StringIO(), force=True)


def test_a_host_that_set_up_logging_keeps_it() -> None:
    root = logging.getLogger()
    mine = logging.NullHandler()
    saved = list(root.handlers)
    root.handlers[:] = [mine]
    try:
        configure_logging(stream=io.StringIO())
        assert root.handlers == [mine]
    finally:
        root.handlers[:] = saved
