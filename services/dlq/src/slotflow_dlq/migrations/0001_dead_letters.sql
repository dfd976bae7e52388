-- Parked dead letters: one row per origin record, whichever consumers refused it and however
-- often it was sent. The id is the origin "topic:partition:offset" (the DeadLettered envelope id),
-- so a consumer that re-sends a letter after a crash bumps `count` instead of parking it twice.
CREATE TABLE {schema}.dead_letters (
    id                text        PRIMARY KEY,  -- unique origin: parking is idempotent
    status            text        NOT NULL DEFAULT 'parked'
                                  CHECK (status IN ('parked', 'redriven', 'discarded')),
    reason            text        NOT NULL,
    error_type        text        NOT NULL,
    error             text        NOT NULL,
    traceback         text        NOT NULL DEFAULT '',
    source_service    text        NOT NULL,
    seen_by           text[]      NOT NULL DEFAULT '{}',  -- every service that refused it
    topic             text        NOT NULL,
    "partition"       integer     NOT NULL,
    "offset"          bigint      NOT NULL,
    -- The record exactly as it was: key (NULL when it had none), headers as [[name, base64]], value.
    record_key        bytea,
    key_text          text,
    headers           jsonb       NOT NULL DEFAULT '[]'::jsonb,
    value             bytea       NOT NULL,
    value_size        bigint      NOT NULL,
    value_truncated   boolean     NOT NULL DEFAULT false,  -- too large to park whole: no redrive
    record_time       timestamptz,
    original_type     text,
    decoded           jsonb,      -- the original envelope when the value is JSON, for inspection
    run_id            text,
    job_id            text,
    tags              text[]      NOT NULL DEFAULT '{}',
    history           jsonb       NOT NULL DEFAULT '[]'::jsonb,
    redrive_of        text,       -- the entry whose redrive produced this origin record
    prior_redrives    integer     NOT NULL DEFAULT 0,  -- the redrive-count header it arrived with
    count             integer     NOT NULL DEFAULT 1,
    redrive_count     integer     NOT NULL DEFAULT 0,
    first_seen        timestamptz NOT NULL DEFAULT now(),
    last_seen         timestamptz NOT NULL DEFAULT now(),
    status_changed_at timestamptz NOT NULL DEFAULT now(),
    note              text        NOT NULL DEFAULT ''
);

-- Listing is newest first within a status; the oldest parked entry drives the age gauge.
CREATE INDEX dead_letters_status_seen ON {schema}.dead_letters (status, first_seen, id);
CREATE INDEX dead_letters_first_seen ON {schema}.dead_letters (first_seen, id);
CREATE INDEX dead_letters_reason ON {schema}.dead_letters (reason);
CREATE INDEX dead_letters_source ON {schema}.dead_letters (source_service);
CREATE INDEX dead_letters_topic ON {schema}.dead_letters (topic);
CREATE INDEX dead_letters_job ON {schema}.dead_letters (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX dead_letters_run ON {schema}.dead_letters (run_id) WHERE run_id IS NOT NULL;

-- Records to send back to their original topics: the raw outbox of redrives. Staged in the
-- transaction that marks the entry redriven, published by the redrive relay, so "marked redriven"
-- and "sent back" cannot part ways. Raw bytes, because the record must leave exactly as it came.
CREATE TABLE {schema}.redrives (
    seq            bigserial   PRIMARY KEY,
    dead_letter_id text        NOT NULL REFERENCES {schema}.dead_letters (id),
    redrive_number integer     NOT NULL,
    command_id     text        NOT NULL,
    topic          text        NOT NULL,
    record_key     bytea,
    value          bytea       NOT NULL,
    headers        jsonb       NOT NULL,  -- [[name, base64 value], ...]
    created_at     timestamptz NOT NULL DEFAULT now(),
    published_at   timestamptz,
    error          text,      -- set when the topic refused the record (it is not retried)
    -- unique: one record per redrive of an entry, so a replayed command stages nothing new
    UNIQUE (dead_letter_id, redrive_number)
);
CREATE INDEX redrives_pending ON {schema}.redrives (seq) WHERE published_at IS NULL;

-- Commands applied, in order, with what they selected: the operators' audit trail.
CREATE TABLE {schema}.commands (
    command_id  text        PRIMARY KEY,  -- unique: a redelivered command is applied once
    seq         bigserial   NOT NULL,
    kind        text        NOT NULL,
    selection   jsonb       NOT NULL,
    note        text        NOT NULL DEFAULT '',
    matched     integer     NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- Webhook notifications for dead-lettered money-moving runs, staged with the parking and
-- delivered by the notifier: a dead webhook delays nothing and a crash forgets nothing.
CREATE TABLE {schema}.notifications (
    dead_letter_id text        PRIMARY KEY REFERENCES {schema}.dead_letters (id),  -- one per entry
    payload        jsonb       NOT NULL,
    attempts       integer     NOT NULL DEFAULT 0,
    next_at        timestamptz NOT NULL DEFAULT now(),
    delivered_at   timestamptz,
    gave_up_at     timestamptz,
    last_error     text        NOT NULL DEFAULT ''
);
CREATE INDEX notifications_due ON {schema}.notifications (next_at)
    WHERE delivered_at IS NULL AND gave_up_at IS NULL;
