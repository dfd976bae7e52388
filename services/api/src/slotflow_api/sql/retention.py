"""The statements of the read model's retention (`slotflow_api.retention`): the purges and the
horizon, the oldest instant the read model vouches for. `{schema}` is the api's schema, quoted by
`slotflow.pg.statements.sql`. Every purge raises the horizon in the statement that deletes, so
the horizon and the deletion commit together.
"""

# -- the purges (slotflow.pg.retention runs them in batches) ----------------------------------------

# Ended job runs with COALESCE(finished_at, slot) before the cut (runs_ended), at most $2, locked
# and only locked: PURGE_LOCKED_RUNS deletes them in a second statement of the same transaction.
# The projector locks a run (its skeleton upsert) before it adds a due or an attempt, so the
# second statement's snapshot, taken after these locks, sees every due and attempt the run will
# ever have; one statement's snapshot (taken before its locks) missed those committed in between,
# and they outlived their run (slotflow.pg.retention).
LOCK_ENDED_RUNS = """
SELECT run_id FROM {schema}.runs
 WHERE state IN ('completed', 'dead_lettered', 'skipped') AND workflow_id IS NULL
   AND COALESCE(finished_at, slot) < now() - make_interval(secs => $1)
 ORDER BY COALESCE(finished_at, slot)
 LIMIT $2
   FOR UPDATE SKIP LOCKED
"""

# The runs LOCK_ENDED_RUNS locked ($1), with their dues and attempts; the horizon rises to the cut
# ($2 seconds before now()) when any run went. now() is the transaction's instant, so both
# statements name the same cut.
PURGE_LOCKED_RUNS = """
WITH dues AS (
    DELETE FROM {schema}.run_dues WHERE run_id = ANY($1::text[])
), tries AS (
    DELETE FROM {schema}.run_attempts WHERE run_id = ANY($1::text[])
), gone AS (
    DELETE FROM {schema}.runs WHERE run_id = ANY($1::text[]) RETURNING run_id
), raised AS (
    INSERT INTO {schema}.retention AS t (only_row, horizon)
    SELECT true, now() - make_interval(secs => $2) WHERE EXISTS (SELECT 1 FROM gone)
    ON CONFLICT (only_row) DO UPDATE SET horizon = GREATEST(t.horizon, EXCLUDED.horizon)
)
SELECT run_id FROM gone
"""

# Skipped slots before the cut (skipped_slots_slot); the horizon rises as for runs.
PURGE_SKIPPED = """
WITH doomed AS (
    SELECT schedule_id, slot FROM {schema}.skipped_slots
     WHERE slot < now() - make_interval(secs => $1)
     ORDER BY slot
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM {schema}.skipped_slots s USING doomed d
     WHERE s.schedule_id = d.schedule_id AND s.slot = d.slot RETURNING s.slot
), raised AS (
    INSERT INTO {schema}.retention AS t (only_row, horizon)
    SELECT true, now() - make_interval(secs => $1) WHERE EXISTS (SELECT 1 FROM gone)
    ON CONFLICT (only_row) DO UPDATE SET horizon = GREATEST(t.horizon, EXCLUDED.horizon)
)
SELECT slot FROM gone
"""

# Operators' repairs of slots before the cut (slot_repairs_slot): the audit shows a repair beside
# its slot's verdict and judges no slot before the horizon, so the horizon rises to the cut as for
# skipped slots, and a repair outlives no slot the audit still judges.
PURGE_SLOT_REPAIRS = """
WITH doomed AS (
    SELECT event_id, slot FROM {schema}.slot_repairs
     WHERE slot < now() - make_interval(secs => $1)
     ORDER BY slot
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM {schema}.slot_repairs s USING doomed d
     WHERE s.event_id = d.event_id AND s.slot = d.slot RETURNING s.slot
), raised AS (
    INSERT INTO {schema}.retention AS t (only_row, horizon)
    SELECT true, now() - make_interval(secs => $1) WHERE EXISTS (SELECT 1 FROM gone)
    ON CONFLICT (only_row) DO UPDATE SET horizon = GREATEST(t.horizon, EXCLUDED.horizon)
)
SELECT slot FROM gone
"""


# -- the horizon --------------------------------------------------------------------------------

# The oldest instant the read model vouches for (one row at most: `only_row` is its primary key).
RETENTION_HORIZON = "SELECT horizon FROM {schema}.retention"

# After each projected batch, in its transaction: the batch's job runs ($1) that ended before the
# horizon go again with their dues and attempts, and so do skipped slots before it. Everything
# there was purged (or would have been), so a rebuild replaying the topics, or a fact that arrives
# after its run went, never brings it back; the horizon keeps meaning "nothing before it is here".
# The batch holds these runs' locks (its skeleton upsert), so this snapshot sees every due and
# attempt they have. Slot repairs before the horizon go too (a replayed SlotsRerun or SlotsMarked
# would bring them back). Without a horizon (nothing purged yet) nothing matches.
FORGET_PURGED = """
WITH cut AS (
    SELECT horizon FROM {schema}.retention
), doomed AS (
    SELECT r.run_id FROM {schema}.runs r, cut
     WHERE r.run_id = ANY($1::text[]) AND r.workflow_id IS NULL
       AND r.state IN ('completed', 'dead_lettered', 'skipped')
       AND COALESCE(r.finished_at, r.slot) < cut.horizon
    UNION
    -- A JobDue from before the horizon projected after its run was purged (its topic's consumer
    -- behind the run events', or a rebuild reading them in that order) would bring the run back
    -- as 'due' for good: a run with no attempt whose every due predates the horizon goes too.
    -- One claimed later comes back with its attempt's facts, which are newer than the horizon.
    SELECT r.run_id FROM {schema}.runs r, cut
     WHERE r.run_id = ANY($1::text[]) AND r.workflow_id IS NULL AND r.state = 'due'
       AND NOT EXISTS (SELECT 1 FROM {schema}.run_attempts a WHERE a.run_id = r.run_id)
       AND NOT EXISTS (SELECT 1 FROM {schema}.run_dues d WHERE d.run_id = r.run_id AND d.due_at >= cut.horizon)
), dues AS (
    DELETE FROM {schema}.run_dues WHERE run_id IN (SELECT run_id FROM doomed)
), tries AS (
    DELETE FROM {schema}.run_attempts WHERE run_id IN (SELECT run_id FROM doomed)
), slots AS (
    DELETE FROM {schema}.skipped_slots s USING cut WHERE s.slot < cut.horizon
), repairs AS (
    DELETE FROM {schema}.slot_repairs s USING cut WHERE s.slot < cut.horizon
)
DELETE FROM {schema}.runs WHERE run_id IN (SELECT run_id FROM doomed)
"""
