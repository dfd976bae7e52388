-- The purge walks ended runs oldest last change first; only ended rows are in this index.
CREATE INDEX runs_ended ON {schema}.runs (updated_at)
    WHERE state IN ('completed', 'skipped', 'cancelled');
