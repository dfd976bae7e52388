-- Workflow payloads too large to travel inside a history event (inputs, results and signals above
-- the offload threshold, default 64 KiB), stored once by content and referenced from the event as
-- "sha256:<hex>" (slotflow.pg.payloads). Rows are written once and never updated: a reference in
-- a recorded history must resolve to the same bytes on every replay.
CREATE TABLE {schema}.payloads (
    -- unique: the same bytes put twice, or by two writers at once, are one row (ON CONFLICT DO NOTHING)
    ref        text        PRIMARY KEY,
    data       bytea       NOT NULL,
    size       integer     NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- content-addressed by construction: no row can hold bytes its reference does not name
    CONSTRAINT payloads_ref_is_digest CHECK (ref = 'sha256:' || encode(sha256(data), 'hex')),
    -- kept beside the bytes so size queries never read (and decompress) the payloads themselves
    CONSTRAINT payloads_size_is_length CHECK (size = octet_length(data))
);
