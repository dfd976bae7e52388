"""The orchestrator's intake checks the signature of every workflow command it takes: its own list
of commands (typed, for `workflow_id`) is the catalogue's, so a command added there (RetryActivity
was) cannot become an input without the check."""

from slotflow.contracts.catalogue import WORKFLOW_COMMAND_TYPES
from slotflow.contracts.scopes import COMMAND_SCOPES
from slotflow_orchestrator.intake import COMMANDS


def test_the_intakes_commands_are_every_workflow_command_each_with_its_scope() -> None:
    assert set(COMMANDS) == set(WORKFLOW_COMMAND_TYPES)
    assert all(COMMAND_SCOPES[command] == "operate" for command in COMMANDS)
