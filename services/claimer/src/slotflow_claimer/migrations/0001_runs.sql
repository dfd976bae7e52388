-- One row per run: the claimer's durable truth about who runs it, with which token, until when.
CREATE TABLE {schema}.runs (
    -- The slot label ("{job_id}@{slot}" or "{workflow_id}/{sequence}"): unique, so every
    -- duplicate or redelivered JobDue of one slot collapses onto this row instead of running again.
    run_id           text        PRIMARY KEY,
    job_id           text        NOT NULL,
    slot             timestamptz NOT NULL,
    kind             text        NOT NULL,
    handler          text        NOT NULL,
    payload          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    retry            jsonb       NOT NULL,
    overlap          text        NOT NULL CHECK (overlap IN ('allow', 'skip', 'buffer_one', 'cancel_previous')),
    workflow_id      text,
    sequence         integer,
    tags             text[]      NOT NULL DEFAULT '{}',
    -- Counts up over the run's whole life (a redrive continues it), so ids built from it stay unique.
    attempt          integer     NOT NULL CHECK (attempt >= 1),
    -- First attempt of the current retry budget: a redrive opens a fresh budget here.
    round_start      integer     NOT NULL,
    -- Highest slotflow-redrive-count applied: a redrive reopens a dead-lettered run once, not twice.
    redrive_count    integer     NOT NULL DEFAULT 0,
    state            text        NOT NULL CHECK (state IN (
                         'pending', 'running', 'completed', 'retrying', 'dead_lettered', 'skipped', 'cancelled')),
    -- Raised by one on every claim; outcome writes must carry the current value (the fence).
    fence_token      bigint      NOT NULL DEFAULT 0,
    owner            text,
    -- Judged against the database clock only; a live lease held by another claimer means "skip".
    lease_expires_at timestamptz,
    heartbeat_at     timestamptz,
    cancel_requested boolean     NOT NULL DEFAULT false,
    takeovers        integer     NOT NULL DEFAULT 0,
    -- Failed attempts, takeovers and cancellations, oldest first (AttemptRecord-shaped objects).
    history          jsonb       NOT NULL DEFAULT '[]'::jsonb,
    result           jsonb,
    error            jsonb,
    -- The JobDue record that last claimed the run, byte-exact: retries are built from it and a
    -- dead letter carries it, so the DLQ can redrive the very same record.
    due_topic        text        NOT NULL,
    due_partition    integer     NOT NULL,
    due_offset       bigint      NOT NULL,
    due_key          bytea,
    due_value        bytea       NOT NULL,
    due_headers      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    due_timestamp_ms bigint,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- The reaper looks only at running rows, oldest lease first.
CREATE INDEX runs_running_lease ON {schema}.runs (lease_expires_at) WHERE state = 'running';
-- Overlap decisions and buffered starts look up the live and buffered runs of one job.
CREATE INDEX runs_job_active ON {schema}.runs (job_id) WHERE state IN ('running', 'pending');
