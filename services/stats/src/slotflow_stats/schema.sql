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
    family       text        NOT NULL CHECK (family IN ('runs', 'schedules', 'dlq')),
    subject      text        NOT NULL,  -- schedule (job) id, or the original topic for 'dlq'
    part         integer     NOT NULL,  -- source partition
    events       bigint      NOT NULL,
    counts       jsonb       NOT NULL,  -- counter name -> count
    duration     jsonb       NOT NULL,  -- slotflow_stats.histogram buckets, seconds
    lateness     jsonb       NOT NULL,
    PRIMARY KEY (size_s, window_start, family, subject, part)
);

-- The api reads a time range of one size and family.
CREATE INDEX IF NOT EXISTS windows_by_time ON {schema}.windows (size_s, family, window_start);

-- Which handler each job runs, from its newest JobDue (run events do not name the handler).
CREATE TABLE IF NOT EXISTS {schema}.job_handlers (
    job_id  text        PRIMARY KEY,
    handler text        NOT NULL,
    seen_at timestamptz NOT NULL
);
