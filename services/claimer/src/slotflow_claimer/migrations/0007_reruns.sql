-- The highest operator's re-run number (RerunSlots, recorded by the ticker) a run has taken. A
-- re-run's JobDue reopens a dead-lettered, retrying, skipped or cancelled run once per number above
-- this one, so the same re-run delivered twice reopens it once.
ALTER TABLE {schema}.runs ADD COLUMN rerun_count integer NOT NULL DEFAULT 0;
