-- The oldest instant the read model still vouches for: every job run whose slot is at or after
-- it is kept. Only a purge that deleted something raises it (and it never goes back).
CREATE TABLE {schema}.retention (
    only_row boolean     PRIMARY KEY DEFAULT true CHECK (only_row),  -- one row
    horizon  timestamptz NOT NULL
);
-- The purges walk ended job runs by when they ended, and skipped slots by slot.
CREATE INDEX runs_ended ON {schema}.runs (COALESCE(finished_at, slot))
    WHERE state IN ('completed', 'dead_lettered', 'skipped') AND workflow_id IS NULL;
CREATE INDEX skipped_slots_slot ON {schema}.skipped_slots (slot);
