-- A Backfill's [start, end), so the api can count a schedule's backfills still in flight
-- (SLOTFLOW_API_MAX_BACKFILLS_IN_FLIGHT): answered by no one yet, or a run of its range unfinished.
-- NULL for every other command.
ALTER TABLE {schema}.commands ADD COLUMN range_start timestamptz, ADD COLUMN range_end timestamptz;
CREATE INDEX commands_backfills ON {schema}.commands (subject) WHERE range_start IS NOT NULL;
