-- Workflows as their typed history (the workflow-history topic) makes them: docs/workflows-history.md.

-- Every typed history event, one row per (workflow, sequence). The first event projected at a
-- sequence keeps it: one partition per workflow means that is the one appended first, in every
-- rebuild too. A re-append (same envelope id) never gets here: `seen` collapses it.
CREATE TABLE {schema}.workflow_events (
    workflow_id text        NOT NULL,
    sequence    integer     NOT NULL CHECK (sequence >= 1),
    event_id    text        NOT NULL,
    type        text        NOT NULL,
    version     integer     NOT NULL,
    at          timestamptz NOT NULL,
    data        jsonb       NOT NULL,
    PRIMARY KEY (workflow_id, sequence)
);

-- Derived from workflow_events by a pure function (slotflow_api.workflow_state.fold) after every
-- batch that touched the workflow; NULL last_sequence means no typed history yet.
ALTER TABLE {schema}.workflows
    ADD COLUMN current_step  text,
    ADD COLUMN last_sequence integer,
    ADD COLUMN started_at    timestamptz,
    ADD COLUMN ended_at      timestamptz,
    ADD COLUMN derived       jsonb;
CREATE INDEX workflows_status ON {schema}.workflows (status, requested_at DESC);

-- The wire version of each history entry, so a reader can decode typed entries.
ALTER TABLE {schema}.workflow_history ADD COLUMN version integer NOT NULL DEFAULT 1;
