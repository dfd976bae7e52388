"""The statements the api reads the stats processor's windows with (`slotflow_api.stats`). They
read the processor's own schema (`stats`, written by services/stats), passed as `{schema}` and
quoted by `slotflow.pg.statements.sql`; `{subject}` is SUBJECT_FILTER or nothing. Nothing is locked:
the processor keeps writing while the api reads.
"""

from slotflow.pg.statements import compose

# One family's windows of one size in [since, until); a schedule's run windows carry the handler
# its job's newest JobDue named (the sink's job_handlers: the schedule's label), the others none.
_WINDOWS = """
SELECT w.subject, {handler} AS handler, w.window_start, w.counts, w.duration, w.lateness
  FROM {schema}.windows w {join}
 WHERE w.size_s = $1 AND w.family = $2 AND w.window_start >= $3 AND w.window_start < $4{subject}
"""
RUN_WINDOWS = compose(
    _WINDOWS, handler="h.handler", join="LEFT JOIN {schema}.job_handlers h ON h.job_id = w.subject"
)
# Handler windows: a subject with the legacy prefix is a job, whose newest JobDue names the handler.
HANDLER_WINDOWS = compose(
    _WINDOWS,
    handler="h.handler",
    join="LEFT JOIN {schema}.job_handlers h ON w.subject LIKE '~%' AND h.job_id = substr(w.subject, 2)",
)
PLAIN_WINDOWS = compose(_WINDOWS, handler="NULL::text", join="")
#: The one series asked for (`$5`): the window's subject (a job, workflow, handler or topic).
SUBJECT_FILTER = " AND w.subject = $5"


# SlotSkipped comes from the schedule topic (its own windows); merged into the runs series.
SLOTS_SKIPPED_WINDOWS = """
SELECT w.subject, h.handler, w.window_start, sum((w.counts->>'slots_skipped')::bigint) AS n
  FROM {schema}.windows w LEFT JOIN {schema}.job_handlers h ON h.job_id = w.subject
 WHERE w.size_s = $1 AND w.family = 'schedules' AND w.window_start >= $2 AND w.window_start < $3
 GROUP BY w.subject, h.handler, w.window_start
"""
