-- What a run page shows beyond the lists: the payload the run was given (from its JobDue), and
-- per claim the failure's traceback and the handler's log lines for that attempt (RunFailed,
-- RunCompleted). Kept off the list queries, which select them only for one run.
ALTER TABLE {schema}.runs ADD COLUMN payload jsonb;
ALTER TABLE {schema}.run_attempts ADD COLUMN traceback text;
ALTER TABLE {schema}.run_attempts ADD COLUMN logs jsonb;
