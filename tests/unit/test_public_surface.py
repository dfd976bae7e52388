"""The public surface of `slotflow.workflow` and `slotflow.client`, pinned.

What a user imports from the package is its `__all__`, each name documented; everything else the
package shows is one of the submodules listed here as public. An implementation module is private
(`_api`, `_saga`), so its helpers are not reachable as if they were API: `slotflow.workflow.api.schedule`
once was, and workflow code could call it and skip the SDK's checks.
"""

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import slotflow.client
import slotflow.workflow

WORKFLOW_ALL = [
    "ActivityError",
    "ActivityInputError",
    "ActivityTimeoutError",
    "CancelledError",
    "ChildWorkflowError",
    "ChildWorkflowHandle",
    "Compensation",
    "HistoryLimitExceeded",
    "InvalidHistory",
    "NonDeterminismError",
    "NotInWorkflow",
    "ParentClosePolicy",
    "QueryError",
    "ReplayResult",
    "Replayer",
    "RetryPolicy",
    "Saga",
    "SearchAttribute",
    "UnknownQuery",
    "UnknownWorkflowType",
    "WorkflowDefinitionError",
    "WorkflowDeterminismError",
    "WorkflowError",
    "WorkflowInfo",
    "continue_as_new",
    "create_task",
    "defn",
    "deprecate_patch",
    "execute_activity",
    "execute_child_workflow",
    "gather",
    "info",
    "memo",
    "now",
    "patched",
    "query",
    "random",
    "run",
    "signal",
    "sleep",
    "start_child_workflow",
    "upsert_memo",
    "upsert_search_attributes",
    "uuid4",
    "wait_condition",
    "wait_signal",
]
#: Submodules with a public role of their own: the decision step the orchestrator drives
#: (`runtime`, `commands`), the test environment (`testing`), payloads by reference, `slotflow
#: workflow check`, replay, and the modules whose names the package re-exports. Any other module is
#: an implementation detail and starts with an underscore.
WORKFLOW_MODULES = {
    "check",
    "children",
    "commands",
    "definition",
    "errors",
    "payloads",
    "replayer",
    "runtime",
    "testing",
}

CLIENT_ALL = [
    "ApiError",
    "BrokerUnreachable",
    "BulkWorkflow",
    "BulkWorkflowsResult",
    "Client",
    "ClientClosed",
    "ClientError",
    "CommandRejected",
    "CommandStatus",
    "CommandTransport",
    "Conflict",
    "DeadLetter",
    "DeadLetterPreview",
    "Forbidden",
    "HttpTransport",
    "InvalidRequest",
    "KafkaTransport",
    "NotAuthorized",
    "NotFound",
    "Page",
    "ReadsNeedHttp",
    "RepairResult",
    "RepairSlot",
    "Run",
    "Schedule",
    "Sent",
    "SyncClient",
    "SyncWorkflowHandle",
    "Unavailable",
    "WaitTimedOut",
    "Workflow",
    "WorkflowCancelledError",
    "WorkflowFailedError",
    "WorkflowHandle",
    "WorkflowOutcomeError",
    "WorkflowQueryFailedError",
    "WorkflowRejectedError",
    "WorkflowResultError",
    "WorkflowResultTimeoutError",
    "WorkflowTerminatedError",
]
#: The client's error types and data models; the client, its workflow handles and its transports
#: (`_client`, `_handles`, `_http`, `_kafka`) are implementation modules, their public names
#: re-exported by the package.
CLIENT_MODULES = {"errors", "models"}

#: Names that cannot carry a docstring (type aliases) and the module whose `#:` comment documents them.
ALIASES = {"ParentClosePolicy": "slotflow.contracts.workflows"}

SURFACES = [
    pytest.param(slotflow.workflow, WORKFLOW_ALL, WORKFLOW_MODULES, id="workflow"),
    pytest.param(slotflow.client, CLIENT_ALL, CLIENT_MODULES, id="client"),
]


def _documented(name: str, value: object) -> bool:
    if name in ALIASES:
        source = inspect.getsource(importlib.import_module(ALIASES[name])).splitlines()
        at = next(i for i, line in enumerate(source) if line.startswith(f"{name} ="))
        return source[at - 1].startswith("#: ")
    return bool(inspect.getdoc(value)) and (inspect.isclass(value) or callable(value))


@pytest.mark.parametrize(("package", "expected", "modules"), SURFACES)
def test_all_is_the_pinned_list(package: ModuleType, expected: list[str], modules: set[str]) -> None:
    assert package.__all__ == expected


@pytest.mark.parametrize(("package", "expected", "modules"), SURFACES)
def test_every_exported_name_is_documented(
    package: ModuleType, expected: list[str], modules: set[str]
) -> None:
    undocumented = [name for name in package.__all__ if not _documented(name, getattr(package, name))]
    assert undocumented == []


@pytest.mark.parametrize(("package", "expected", "modules"), SURFACES)
def test_only_the_exports_and_the_public_modules_are_public(
    package: ModuleType, expected: list[str], modules: set[str]
) -> None:
    public = {name for name in vars(package) if not name.startswith("_")}
    assert public - set(package.__all__) <= modules
    files = {info.name for info in pkgutil.iter_modules(package.__path__)}
    assert {name for name in files if not name.startswith("_")} == modules


def test_the_sdks_implementation_is_not_reachable_as_api() -> None:
    assert not hasattr(slotflow.workflow, "api")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("slotflow.workflow.api")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("slotflow.workflow.saga")
