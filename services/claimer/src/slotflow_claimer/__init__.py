"""slotflow claimer: claims runs with a lease and a fencing token, runs handlers, records outcomes."""
