-- buffer_all: every run of a job waits its turn, at most max_concurrent of them running at once
-- (a backfill's runs, one after another in slot order by default).
ALTER TABLE {schema}.runs DROP CONSTRAINT runs_overlap_check;
ALTER TABLE {schema}.runs ADD CONSTRAINT runs_overlap_check
    CHECK (overlap IN ('allow', 'skip', 'buffer_one', 'buffer_all', 'cancel_previous'));
-- How many runs of the job may run at once when this one waits under buffer_all (1 otherwise).
ALTER TABLE {schema}.runs ADD COLUMN max_concurrent integer NOT NULL DEFAULT 1 CHECK (max_concurrent >= 1);
