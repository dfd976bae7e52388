"""slotflow dlq: parks poison messages from every consumer, and lists, redrives and discards them."""
