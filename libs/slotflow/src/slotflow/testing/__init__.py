"""Helpers for slotflow's own tests and for users testing their handlers."""

from slotflow.testing.runs import run_context
from slotflow.testing.waiting import assert_eventually, unique_name

__all__ = ["assert_eventually", "run_context", "unique_name"]
