"""The command-to-scope table is complete, and the api's command routes take their scope from it."""

from slotflow.contracts.catalogue import COMMAND_TYPES
from slotflow.contracts.scopes import COMMAND_SCOPES, SCOPES, grants, scope_needed


def test_every_command_has_a_scope_and_nothing_else_does() -> None:
    assert set(COMMAND_SCOPES) == set(COMMAND_TYPES)


def test_no_command_needs_only_read_and_an_unknown_type_needs_admin() -> None:
    assert "read" not in set(COMMAND_SCOPES.values())
    assert scope_needed("schedule.trigger") == "operate"
    assert scope_needed("schedule.create") == "admin"
    assert scope_needed("no.such.command") == "admin"


def test_scopes_nest() -> None:
    assert SCOPES == ("read", "operate", "admin")
    assert grants("admin", "operate")
    assert grants("operate", "read")
    assert grants("read", "read")
    assert not grants("read", "operate")
    assert not grants("operate", "admin")
