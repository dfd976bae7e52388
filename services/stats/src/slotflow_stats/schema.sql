-- The stats sink: a copy of the stream processor's windowed tables (the tables and their
-- changelog topics are the state). Idempotent: applied at every worker start. The schema itself
-- is created by sink.create_schema when missing (a role given only its own schema cannot run
-- CREATE SCHEMA, not even IF NOT EXISTS).

-- One row per window, subject and source partition. Invariant: (size_s, window_start, family,
-- subject, part) is one faust table key; `events` counts the records applied to it and never
-- decreases (the upsert refuses a smaller one). A subject's window is the sum over its parts.
CREATE TABLE IF NOT EXISTS {schema}.windows (
    size_s       integer     NOT NULL CHECK (size_s IN (60, 3600)),
    window_start timestamptz NOT NULL,
    family       text        NOT NULL,  -- windows_family_check below
    subject      text        NOT NULL,  -- schedule (job) id, workflow id, handler, or the original topic for 'dlq'
    part         integer     NOT NULL,  -- source partition
    events       bigint      NOT NULL,
    counts       jsonb       NOT NULL,  -- counter name -> count
    duration     jsonb       NOT NULL,  -- slotflow_stats.histogram buckets, seconds
    lateness     jsonb       NOT NULL,
    PRIMARY KEY (size_s, window_start, family, subject, part)
);

-- The families (slotflow_stats.observe.StoredFamily): a schedule's runs by job id ('runs'), a
-- workflow's activity runs by workflow id ('workflows'), every run by the handler it ran
-- ('handlers'; '~' and a job id for a run event that did not name its handler), slots skipped ('schedules'), parked dead letters by original topic ('dlq').
-- Migration: tables created before 'workflows' and 'handlers' carried an inline check of the
-- three others (named windows_family_check by PostgreSQL); replaced once, in the transaction of
-- the rest of this file, so no worker ever finds no check at all. Checked first: this file runs at
-- every worker start, and the ALTER would lock and scan the whole table each time.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint
         WHERE conrelid = '{schema}.windows'::regclass AND conname = 'windows_family_check'
           AND pg_get_constraintdef(oid) LIKE '%handlers%'
    ) THEN
        ALTER TABLE {schema}.windows DROP CONSTRAINT IF EXISTS windows_family_check;
        ALTER TABLE {schema}.windows ADD CONSTRAINT windows_family_check
            CHECK (family IN ('runs', 'workflows', 'handlers', 'schedules', 'dlq'));
    END IF;
END
$$;

-- The api reads a time range of one size and family.
CREATE INDEX IF NOT EXISTS windows_by_time ON {schema}.windows (size_s, family, window_start);

-- Which handler each job runs, from its newest JobDue (run events do not name the handler).
CREATE TABLE IF NOT EXISTS {schema}.job_handlers (
    job_id  text        PRIMARY KEY,
    handler text        NOT NULL,
    seen_at timestamptz NOT NULL
);
