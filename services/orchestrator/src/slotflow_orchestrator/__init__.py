"""slotflow orchestrator: durable workflows, one PostgreSQL transaction per decision."""
