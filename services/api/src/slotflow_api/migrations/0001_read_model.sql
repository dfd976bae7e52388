-- The api read model. Every row is derived from Kafka topics: `python -m slotflow_api rebuild` drops
-- this schema and replays the topics into it from the beginning, with the same result.
-- No column takes now(): a rebuilt table must equal the original row for row.

-- Which consumer group feeds this read model. A rebuild writes a new group id, so it replays from
-- offset 0, and a projector still running with the old group sees the change and restarts.
CREATE TABLE {schema}.projector_state (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),  -- exactly one row
    group_id  text    NOT NULL
);

-- Events already projected. Unique (topic, event id): a redelivered record changes nothing.
CREATE TABLE {schema}.seen (
    topic    text NOT NULL,
    event_id text NOT NULL,
    PRIMARY KEY (topic, event_id)
);

CREATE TABLE {schema}.schedules (
    schedule_id  text        PRIMARY KEY,
    definition   jsonb       NOT NULL,
    handler      text        NOT NULL,
    tags         text[]      NOT NULL DEFAULT '{}',
    paused       boolean     NOT NULL DEFAULT false,
    pause_reason text,
    resume_at    timestamptz,
    next_fire_at timestamptz,
    deleted      boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);
CREATE INDEX schedules_handler ON {schema}.schedules (handler, schedule_id);
CREATE INDEX schedules_tags ON {schema}.schedules USING gin (tags);

-- A schedule's life as the audit needs it: which definition was in force when, pauses, deletion.
-- Keyed by event id: the same event projected twice is one row.
CREATE TABLE {schema}.schedule_timeline (
    schedule_id text        NOT NULL,
    event_id    text        NOT NULL,
    position    bigint      NOT NULL,  -- offset in the schedule's partition: the order they happened
    at          timestamptz NOT NULL,
    change      text        NOT NULL,  -- created | updated | paused | resumed | deleted
    definition  jsonb,
    PRIMARY KEY (schedule_id, event_id)
);

-- One row per run (the slot is its identity), derived from run_dues and run_attempts.
CREATE TABLE {schema}.runs (
    run_id      text        PRIMARY KEY,
    job_id      text        NOT NULL,
    slot        timestamptz NOT NULL,
    kind        text,
    handler     text,
    tags        text[]      NOT NULL DEFAULT '{}',
    workflow_id text,
    sequence    integer,
    state       text        NOT NULL,  -- due | running | failed | retrying | completed | dead_lettered | skipped
    attempt     integer     NOT NULL DEFAULT 0,
    fence_token bigint,
    owner       text,
    due_at      timestamptz,           -- first JobDue's occurred_at
    produced_at timestamptz,           -- first JobDue's Kafka timestamp
    fire_at     timestamptz,           -- slot plus jitter: lateness is measured against this
    started_at  timestamptz,
    finished_at timestamptz,
    result      jsonb,
    error       jsonb,
    completions integer     NOT NULL DEFAULT 0  -- claims that completed: more than one is a duplicated effect
);
CREATE INDEX runs_job_slot ON {schema}.runs (job_id, slot, run_id);
CREATE INDEX runs_slot ON {schema}.runs (slot DESC, run_id DESC);
CREATE INDEX runs_state ON {schema}.runs (state, slot DESC);
CREATE INDEX runs_workflow ON {schema}.runs (workflow_id, sequence) WHERE workflow_id IS NOT NULL;

-- Every JobDue, per attempt. Unique (run_id, attempt): a slot emitted twice is one row.
CREATE TABLE {schema}.run_dues (
    run_id      text        NOT NULL,
    attempt     integer     NOT NULL,
    kind        text        NOT NULL,
    due_at      timestamptz NOT NULL,
    produced_at timestamptz,
    fire_at     timestamptz,
    PRIMARY KEY (run_id, attempt)
);

-- Every claim of a run: one row per (fence token, attempt). Facts merge commutatively (highest
-- rank wins, earliest start, latest finish), so run events arriving out of order across
-- partitions or batches land in the same row: a late RunStarted never undoes a RunCompleted.
CREATE TABLE {schema}.run_attempts (
    run_id      text        NOT NULL,
    attempt     integer     NOT NULL,
    fence_token bigint      NOT NULL,
    owner       text        NOT NULL,
    outcome     text        NOT NULL,  -- running | failed | retrying | skipped | dead_lettered | completed
    rank        smallint    NOT NULL,
    completed   boolean     NOT NULL DEFAULT false,
    started_at  timestamptz,
    finished_at timestamptz,
    retry_at    timestamptz,
    error       jsonb,
    result      jsonb,
    PRIMARY KEY (run_id, fence_token, attempt)
);

-- Slots that will not run, and why (SlotSkipped). Unique per slot.
CREATE TABLE {schema}.skipped_slots (
    schedule_id text        NOT NULL,
    slot        timestamptz NOT NULL,
    run_id      text        NOT NULL,
    reason      text        NOT NULL,
    detail      text        NOT NULL,
    at          timestamptz NOT NULL,
    PRIMARY KEY (schedule_id, slot)
);

-- Commands seen on the command topics and their acknowledgements (read-your-writes).
CREATE TABLE {schema}.commands (
    command_id      text        PRIMARY KEY,
    command_type    text,
    subject         text,
    status          text        NOT NULL,  -- pending | published | accepted | rejected
    reason          text,
    source          text,
    published_at    timestamptz,
    acknowledged_at timestamptz
);

-- Durable one-shot timers (workflow sleeps, retry back-offs) as the ticker was asked and answered.
CREATE TABLE {schema}.timers (
    timer_id text        PRIMARY KEY,
    owner    text        NOT NULL,
    action   text        NOT NULL,  -- timer_fired | job_due
    sequence integer,
    fire_at  timestamptz,
    status   text        NOT NULL,  -- pending | cancelled | fired
    rank     smallint    NOT NULL,  -- fired beats cancelled beats pending, whatever order they arrive in
    fired_at timestamptz
);
CREATE INDEX timers_owner ON {schema}.timers (owner);

CREATE TABLE {schema}.workflows (
    workflow_id      text        PRIMARY KEY,
    workflow_type    text,
    input            jsonb,
    status           text        NOT NULL,  -- requested until the orchestrator records otherwise
    cancel_requested boolean     NOT NULL DEFAULT false,
    cancel_reason    text,
    requested_at     timestamptz,
    updated_at       timestamptz NOT NULL
);
CREATE INDEX workflows_type ON {schema}.workflows (workflow_type, requested_at DESC);
CREATE INDEX workflows_requested ON {schema}.workflows (requested_at DESC, workflow_id DESC);

-- Everything known about one workflow, from every topic that speaks of it, one row per event.
CREATE TABLE {schema}.workflow_history (
    workflow_id text        NOT NULL,
    entry_id    text        NOT NULL,  -- "{topic}/{event id}": unique, so replays collapse
    at          timestamptz NOT NULL,
    origin      text        NOT NULL,  -- command | history | activity | timer
    type        text        NOT NULL,
    sequence    integer,
    data        jsonb       NOT NULL,
    PRIMARY KEY (workflow_id, entry_id)
);
CREATE INDEX workflow_history_at ON {schema}.workflow_history (workflow_id, at, entry_id);

-- The DLQ as the dlq service reports it (DeadLetterStatusChanged, ordered per dead letter).
CREATE TABLE {schema}.dead_letters (
    dead_letter_id text        PRIMARY KEY,
    status         text        NOT NULL,
    reason         text        NOT NULL,
    topic          text        NOT NULL,
    source_service text        NOT NULL,
    partition      integer,
    "offset"       bigint,
    key            text,
    job_id         text,
    run_id         text,
    original_type  text,
    error_type     text        NOT NULL DEFAULT '',
    error          text        NOT NULL DEFAULT '',
    tags           text[]      NOT NULL DEFAULT '{}',
    count          integer     NOT NULL DEFAULT 1,
    redrive_count  integer     NOT NULL DEFAULT 0,
    first_seen     timestamptz,
    last_seen      timestamptz,
    status_at      timestamptz NOT NULL,
    note           text        NOT NULL DEFAULT '',
    command_id     text,
    redrive_of     text
);
CREATE INDEX dead_letters_seen ON {schema}.dead_letters (status_at DESC, dead_letter_id DESC);
