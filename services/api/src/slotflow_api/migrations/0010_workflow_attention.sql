-- What a workflow's row says beyond its typed history (docs/api.md, "Workflows"):
-- rejection:     the reason the orchestrator refused the StartWorkflow that made the row, while
--                no history exists (status `rejected`; it stayed `requested` forever before);
-- waiting_for / waiting_since: what an open workflow waits on when only a signal can move it
--                (`signal approve`, or `signal` for an untimed wait) and since when, from the
--                history's fold: what the list's attention filter asks about.
ALTER TABLE {schema}.workflows
    ADD COLUMN rejection     text,
    ADD COLUMN waiting_for   text,
    ADD COLUMN waiting_since timestamptz;
CREATE INDEX workflows_waiting ON {schema}.workflows (waiting_since) WHERE waiting_since IS NOT NULL;
