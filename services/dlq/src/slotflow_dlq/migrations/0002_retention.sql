-- The purge of resolved letters walks them oldest status change first; only resolved rows are
-- in this index, so it stays as small as the backlog the purge has left.
CREATE INDEX dead_letters_resolved ON {schema}.dead_letters (status_changed_at)
    WHERE status IN ('redriven', 'discarded');
