"""slotflow api service: read-model projector, HTTP queries and commands, the slot audit."""
