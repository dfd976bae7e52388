-- Downstreams as the claimers report them (DownstreamChanged, DownstreamReported): the newest
-- state per downstream, and every change. Times come from the events (the claimers' database
-- clock), so a rebuild gives the same rows; the newest fact wins whatever order it is read in.
CREATE TABLE {schema}.downstreams (
    name            text        PRIMARY KEY,
    state           text        NOT NULL,
    manual          boolean     NOT NULL DEFAULT false,
    settings        jsonb       NOT NULL DEFAULT '{}',
    held            integer     NOT NULL DEFAULT 0,
    window_seconds  double precision,
    first_attempts  integer,
    retries         integer,
    retry_allowance integer,
    successes       integer,
    failures        integer,
    -- When the state last changed, and when the numbers above were last reported.
    changed_at      timestamptz NOT NULL,
    reported_at     timestamptz,
    -- The newest fact applied (a change or a report): an older one read later changes nothing.
    fact_at         timestamptz NOT NULL
);

CREATE TABLE {schema}.downstream_changes (
    event_id   text        PRIMARY KEY,
    name       text        NOT NULL,
    from_state text        NOT NULL,
    to_state   text        NOT NULL,
    cause      text        NOT NULL,
    reason     text        NOT NULL,
    manual     boolean     NOT NULL,
    by_claimer text        NOT NULL,
    command_id text,
    held       integer     NOT NULL,
    at         timestamptz NOT NULL
);
CREATE INDEX downstream_changes_name_at ON {schema}.downstream_changes (name, at DESC);
