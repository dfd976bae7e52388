"""The workflow code the orchestrator serves: its modules loaded, and the SDK's runtime
(`slotflow.workflow.runtime`) behind the orchestrator's `WorkflowCode` protocol.

`load_workflow_code(["examples.orders.workflows", ...])` imports the modules (as the claimer imports its
handler modules) and serves every class in them decorated with `@workflow.defn`.
"""

import importlib
from collections.abc import Iterable, Sequence
from datetime import datetime
from types import ModuleType
from typing import Any

from slotflow.contracts import HistoryEvent, StartWorkflow
from slotflow.errors import ConfigurationError
from slotflow.workflow import commands as sdk
from slotflow.workflow.definition import definition_of
from slotflow.workflow.errors import NonDeterminismError, WorkflowDefinitionError
from slotflow.workflow.runtime import WorkflowRuntime
from slotflow_orchestrator.stepping import Diverged, Moves


class RuntimeWorkflowCode:
    """`stepping.WorkflowCode` over a `WorkflowRuntime`."""

    def __init__(self, runtime: WorkflowRuntime) -> None:
        self.runtime = runtime
        self._types = frozenset(runtime.workflow_types)

    def knows(self, workflow_type: str) -> bool:
        return workflow_type in self._types

    def signal_refusal(self, workflow_type: str, signal: str, payload: dict[str, Any]) -> str | None:
        return self.runtime.signal_refusal(workflow_type, signal, payload)

    def replay(self, history: Sequence[HistoryEvent], *, now: datetime) -> Moves:
        try:
            decision = self.runtime.replay(history, now=now)
        except NonDeterminismError as err:
            raise Diverged(err.sequence, err.expected, err.got) from err
        # Activities and timers are sent from their events (ActivityScheduled, TimerStarted), and a
        # run's end is reported to its parent and its children from the history (`stepping`), which
        # covers ends the orchestrator appends itself (terminate, timeout). What is left: cancelled
        # timers, child starts and cancelled activities.
        cancel_timers = [c.timer_id for c in decision.commands if isinstance(c, sdk.CancelTimer)]
        children = [
            (
                child_start_id(c.parent_workflow_id, c.sequence),
                StartWorkflow(
                    workflow_id=c.child_workflow_id,
                    workflow_type=c.workflow_type,
                    input=c.input,
                    parent_workflow_id=c.parent_workflow_id,
                    parent_sequence=c.sequence,
                    parent_close_policy=c.parent_close_policy,
                    memo=c.memo,
                    search_attributes=c.search_attributes,
                ),
            )
            for c in decision.commands
            if isinstance(c, sdk.StartChildWorkflow)
        ]
        cancel_activities = [c.sequence for c in decision.commands if isinstance(c, sdk.CancelActivity)]
        return Moves(
            events=list(decision.events),
            cancel_timers=cancel_timers,
            children=children,
            cancel_activities=cancel_activities,
            abandoned_earlier=decision.abandoned_earlier,
        )


def child_start_id(parent_workflow_id: str, sequence: int) -> str:
    """The command id of the StartWorkflow a parent's ChildWorkflowScheduled at ``sequence`` sends:
    derived from the history, so a rebuild sends the same command again (`Outbound.reissue`)."""
    return f"{parent_workflow_id}#{sequence}/start-child"


def workflows_in(module: ModuleType) -> list[type[object]]:
    """Every class defined in ``module`` that `@workflow.defn` made a workflow."""
    found: list[type[object]] = []
    for value in vars(module).values():
        if isinstance(value, type) and value.__module__ == module.__name__:
            try:
                definition_of(value)
            except WorkflowDefinitionError:
                continue
            found.append(value)
    return found


def load_workflow_code(modules: Iterable[str], *, max_history_events: int = 50_000) -> RuntimeWorkflowCode:
    """Import ``modules`` and serve their workflows.

    Raises:
        ConfigurationError: a module does not import, or none defines a workflow.
    """
    classes: list[type[object]] = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            raise ConfigurationError(f"cannot import workflow module {name!r}: {err}") from err
        classes.extend(workflows_in(module))
    if not classes:
        raise ConfigurationError(
            "no workflows to serve: set SLOTFLOW_ORCHESTRATOR_WORKFLOW_MODULES to modules defining @workflow.defn classes"
        )
    return RuntimeWorkflowCode(
        WorkflowRuntime(
            classes, max_history_events=max_history_events, cache_size=10_000, query_cache_size=1_000
        )
    )
