"""slotflow ticker: owns time. Stores schedules and durable timers, claims due rows with
FOR UPDATE SKIP LOCKED, and emits one JobDue per slot through its transactional outbox."""
