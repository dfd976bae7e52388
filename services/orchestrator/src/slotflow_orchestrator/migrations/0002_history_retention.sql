-- A closed workflow's history is purged from this table after the retention (the history topic
-- keeps it forever); its row stays, so its id is never taken again and late commands still get
-- "already ended". When set, the history rows are gone and the row alone says how it ended.
ALTER TABLE {schema}.workflows ADD COLUMN history_purged_at timestamptz;
-- Closed workflows whose history is still here, by when they closed (a workflow that closed in
-- its first decision has no closed_at: it closed when it started). The purge walks exactly these.
CREATE INDEX workflows_closed_kept ON {schema}.workflows (COALESCE(closed_at, started_at))
    WHERE status IN ('completed', 'failed', 'cancelled') AND history_purged_at IS NULL;
