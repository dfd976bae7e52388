"""Workflow code and a recorder for the `slotflow replay` tests: `recorded` is the code a history
was recorded with; the other modules are changed versions of it under the same workflow name."""
