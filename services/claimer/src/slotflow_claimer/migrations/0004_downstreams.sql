-- One row per downstream a handler declared: its circuit breaker, shared by every claimer.
-- Every decision on a downstream (admit an attempt, record a call's result, move the breaker)
-- is taken under this row's lock (SELECT ... FOR UPDATE) in one transaction with the counters it
-- reads and writes, so N claimers take decisions one after another against the same committed
-- state and never disagree on the breaker or overspend the budget. Time is the database clock.
CREATE TABLE {schema}.downstreams (
    name         text        PRIMARY KEY,
    state        text        NOT NULL DEFAULT 'closed' CHECK (state IN ('closed', 'open', 'half_open')),
    -- When the breaker last opened (the cool-down runs from here); NULL while it never did.
    opened_at    timestamptz,
    -- Probes admitted in the current half-open period (at most the policy's probes).
    probes       integer     NOT NULL DEFAULT 0 CHECK (probes >= 0),
    -- When those probes went out: unanswered probes are written off a cool-down later.
    probed_at    timestamptz,
    -- The window counts calls from here on only: a breaker that closes forgets the outage.
    window_since timestamptz NOT NULL DEFAULT '-infinity',
    changed_at   timestamptz NOT NULL DEFAULT now()
);

-- The sliding window, one row per downstream and second: attempts admitted (first or retry) and
-- results seen. Rows older than twice the window are deleted as new ones are written.
CREATE TABLE {schema}.downstream_window (
    name      text        NOT NULL REFERENCES {schema}.downstreams (name),
    bucket    timestamptz NOT NULL,
    firsts    integer     NOT NULL DEFAULT 0,
    retries   integer     NOT NULL DEFAULT 0,
    successes integer     NOT NULL DEFAULT 0,
    failures  integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (name, bucket)
);

-- A run waiting for its downstream: 'retrying' with a timer, like a retry, but its attempt was not
-- spent (round_start moved up with it). held_reason says why while it waits.
ALTER TABLE {schema}.runs ADD COLUMN held_reason text;

-- Every breaker state change, in the transaction that made it: the audit of an outage as the
-- claimers saw it (who moved it, when by the database clock).
CREATE TABLE {schema}.downstream_changes (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL REFERENCES {schema}.downstreams (name),
    from_state text        NOT NULL,
    to_state   text        NOT NULL,
    owner      text        NOT NULL,
    at         timestamptz NOT NULL DEFAULT now()
);
