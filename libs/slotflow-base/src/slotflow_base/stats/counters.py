"""The stats worker's counter names, per family, in the order the api and the dashboard show them.

The worker counts under these names (`slotflow_stats.observe`) and the api reads them back
(`slotflow_api.stats`), so both take them from here.
"""

#: Runs of a schedule (job): JobDue, the claimer's outcomes, overlap skips.
RUN_COUNTERS = ("due", "started", "completed", "failed", "retried", "dead_lettered", "skipped")
#: A schedule's slots recorded as skipped (SlotSkipped).
SCHEDULE_COUNTERS = ("slots_skipped",)
#: Poison parked in the DLQ, per original topic.
DLQ_COUNTERS = ("parked",)
