-- One row per workflow: what the decision step needs without reading the history.
CREATE TABLE {schema}.workflows (
    workflow_id        text        PRIMARY KEY,  -- one run per id (v1 history ids are `{workflow_id}#{sequence}`)
    -- The partition of slotflow.workflows.commands.v1 its id hashes to: whoever holds that
    -- partition's lease decides for it.
    shard              integer     NOT NULL CHECK (shard >= 0),
    workflow_type      text        NOT NULL,
    status             text        NOT NULL CHECK (status IN ('running', 'stuck', 'completed', 'failed', 'cancelled')),
    -- Sequence of the newest history event; the next append is last_sequence + 1 (gap-free).
    last_sequence      integer     NOT NULL CHECK (last_sequence >= 1),
    start_command_id   text        NOT NULL,
    started_at         timestamptz NOT NULL,
    closed_at          timestamptz,
    execution_deadline timestamptz,
    -- Fencing token of the lease under which the last decision committed (for operators).
    decided_with_token bigint      NOT NULL
);
CREATE INDEX workflows_open ON {schema}.workflows (shard) WHERE status IN ('running', 'stuck');

-- The history as appended: the source every decision replays from. The history topic is fed from
-- the outbox in the same transaction, so topic and table hold the same events.
CREATE TABLE {schema}.history (
    workflow_id text    NOT NULL,
    sequence    integer NOT NULL CHECK (sequence >= 1),
    type        text    NOT NULL,
    -- The event's fields (the envelope's `data`), as the contract model dumps them.
    data        json    NOT NULL,
    -- The shard lease token under which it was appended: which orchestrator's decision wrote it.
    fence_token bigint  NOT NULL,
    -- One event per sequence: a second writer for a workflow fails here even past the lease.
    PRIMARY KEY (workflow_id, sequence)
);

-- Inputs waiting for a decision: commands, activity outcomes, fired timers. Written by whichever
-- orchestrator consumed the record (once, through the inbox), deleted by the decision that
-- applied them, in that decision's transaction.
CREATE TABLE {schema}.inputs (
    seq         bigserial   PRIMARY KEY,  -- arrival order: a workflow's inputs are applied in it
    workflow_id text        NOT NULL,
    shard       integer     NOT NULL,
    type        text        NOT NULL,
    envelope    bytea       NOT NULL,     -- the record's envelope, as the codec encodes it
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX inputs_by_shard ON {schema}.inputs (shard, seq);
CREATE INDEX inputs_by_workflow ON {schema}.inputs (workflow_id, seq);

-- One lease per shard (commands-topic partition). Kafka's group assignment says who should own a
-- shard; this row says who may write for it. Every acquisition raises fence_token by one, and a
-- decision commits only while its token is still the row's (checked under FOR SHARE, so an
-- acquisition waits for decisions in flight and every later one of the old owner is refused).
CREATE TABLE {schema}.shard_leases (
    shard       integer     PRIMARY KEY,
    owner       text,
    fence_token bigint      NOT NULL CHECK (fence_token >= 1),
    acquired_at timestamptz NOT NULL DEFAULT now()
);
